"""The native tool-calls front (``devstack.tool_front``) against the bare llama server, same
requests, same run: ``.venv/bin/python -m bench.tool_front [--pairs 12] [--model smollm2-135m]``.

Two servers on the same weights, started here: the bare ``llama_cpp.server`` and the front
(``python -m devstack.tool_front``, as the stack runs it). For each of a set of support-desk
requests offering two tools, the front gets the native body (``tools`` in it) and the bare
server the body the front sends upstream (``native_tools.translate_request``: the prompt-mode
body); the two calls alternate which goes first. At temperature 0 with a seed both compute the
same answer, so the difference of their wall times is what the front adds.

Prints: the median and p90 of the added latency per call (and relative to the call), the
in-process cost of the translation alone, and the share of answers that are well-formed tool
calls (decoded into ``tool_calls`` of an offered tool; the rest are replies or unparsed text).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.common import Row, emit, interleaved, machine_load
from devstack.components import dev_dir
from devstack.model_server import server_config, weight_files
from devstack.ports import free_ports
from runtime.providers.native_tools import answer_completion, translate_request

SYSTEM = "You are the support agent of an online shop. Look up an order before refunding it."
ASKS = (
    "Order A-1001 arrived broken, please refund it.",
    "Where is my order B-2002?",
    "Please refund 12.50 of order C-3003, one item was missing.",
    "What is the status of order A-1001?",
    "I want my money back for order D-4004.",
    "Hello, can you help me?",
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look up an order by its id: status, amount paid.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "refund",
            "description": "Refund an amount of an order to the customer.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                "required": ["order_id", "amount"],
            },
        },
    },
]


def native_bodies(model: str, count: int) -> list[dict[str, Any]]:
    """``count`` requests: each ask alone, and each after a lookup's result (a second turn)."""
    bodies = []
    for index in range(count):
        ask = ASKS[index % len(ASKS)]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": ask},
        ]
        if index % 2:
            call = {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1001"}'},
            }
            result = '{"order_id": "A-1001", "status": "delivered", "amount": 25.0}'
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{index}", "content": result},
            ]
        bodies.append(
            {
                "model": model,
                "messages": messages,
                "tools": TOOLS,
                "temperature": 0,
                "seed": 7,
                "max_tokens": 96,
            }
        )
    return bodies


def start_server(module: str, home: Path, model: str) -> tuple[subprocess.Popen[bytes], str]:
    """One server (``python -m <module>``) serving ``model``: its process and base URL."""
    port = free_ports(1)[0]
    config = server_config(port, {model: weight_files()[model]})
    path = dev_dir(home) / f"{module}.json"
    path.write_text(json.dumps(config))
    log = (dev_dir(home) / f"{module}.log").open("ab")
    command = [sys.executable, "-m", module, "--config_file", str(path)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.3)
    process.kill()
    process.wait()
    raise RuntimeError(f"{module} never answered on {url}")


def timed_post(
    client: httpx.Client, url: str, body: dict[str, Any]
) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    answer = client.post(f"{url}/chat/completions", json=body)
    answer.raise_for_status()
    return time.perf_counter() - started, answer


def measure(front: str, direct: str, bodies: list[dict[str, Any]]) -> dict[str, Any]:
    """Each body through the front and its prompt-mode form to the bare server, alternating."""
    added, calls, kinds, same_answer = [], [], Counter[str](), 0
    with httpx.Client(timeout=600) as client:
        for body in bodies[:1]:  # warm both: model load, first grammar
            translation = translate_request(body)
            assert translation is not None
            timed_post(client, front, body)
            timed_post(client, direct, translation.upstream)
        for index, body in enumerate(bodies):
            translation = translate_request(body)
            assert translation is not None
            pair = [(front, body), (direct, translation.upstream)]
            times: dict[str, float] = {}
            answers: dict[str, httpx.Response] = {}
            for url, sent in pair if index % 2 == 0 else reversed(pair):
                times[url], answers[url] = timed_post(client, url, sent)
            kinds[answers[front].headers.get("x-replaybook-tool-front", "?")] += 1
            decoded, _ = answer_completion(answers[direct].json(), translation.tools)
            same_answer += _decision(answers[front].json()) == _decision(decoded)
            added.append(times[front] - times[direct])
            calls.append(times[direct])
    return {"added": added, "calls": calls, "kinds": kinds, "same_answer": same_answer}


def _decision(completion: dict[str, Any]) -> Any:
    """What the model decided (the reply, or each call's name and arguments), without the
    call ids, which differ per response."""
    message = completion["choices"][0]["message"]
    calls = [
        (c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()
    ]
    return message.get("content"), calls


def translation_cost(bodies: list[dict[str, Any]]) -> float:
    """Seconds per request of the front's own work (translate the body, decode an answer)."""
    body = bodies[1]
    translation = translate_request(body)
    assert translation is not None
    answer = json.dumps({"tool_call": {"name": "refund", "arguments": {"amount": 5}}})
    upstream = {"id": "x", "choices": [{"index": 0, "message": {"content": answer}}]}

    def both() -> None:
        found = translate_request(body)
        assert found is not None
        answer_completion(upstream, found.tools)

    return interleaved({"translation": both})["translation"]


def report(figures: dict[str, Any], cost: float, model: str) -> list[Row]:
    added, calls, kinds = figures["added"], figures["calls"], figures["kinds"]
    count = len(added)
    p90 = statistics.quantiles(added, n=10)[-1] if count >= 2 else added[0]
    median_call = statistics.median(calls)
    load = machine_load()
    well_formed = kinds["tool_call"] / count
    rows = [
        Row(
            f"tool front: added latency per call, median ({model}, {count} calls)",
            f"{statistics.median(added) * 1000:+.1f} ms (p90 {p90 * 1000:+.1f} ms)",
            f"bare llama server {median_call:.2f} s per call",
            (median_call + statistics.median(added)) / median_call,
            "—",
            None,
            load,
        ),
        Row(
            "tool front: translation in-process (body in, answer out)",
            f"{cost * 1e6:.0f} µs",
            "—",
            None,
            "—",
            None,
            load,
        ),
        Row(
            f"tool front: answers that are well-formed tool calls ({model})",
            f"{kinds['tool_call']}/{count} ({well_formed:.0%}); replies {kinds['content']}, "
            f"unparsed {kinds['unparsed']}; same answer as bare {figures['same_answer']}/{count}",
            "—",
            None,
            "—",
            None,
            load,
        ),
    ]
    for row in rows:
        emit(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=12)
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    bodies = native_bodies(args.model, args.pairs)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        dev_dir(home).mkdir()
        servers: list[subprocess.Popen[bytes]] = []
        try:
            process, front = start_server("devstack.tool_front", home, args.model)
            servers.append(process)
            process, direct = start_server("llama_cpp.server", home, args.model)
            servers.append(process)
            figures = measure(front, direct, bodies)
        finally:
            for process in servers:
                process.terminate()
                process.wait(timeout=30)
    report(figures, translation_cost(bodies), args.model)


if __name__ == "__main__":
    main()
