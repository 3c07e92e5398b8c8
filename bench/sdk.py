"""Benchmark: what the client SDK (``sdk/``, ``import replaybook``) costs an agent.

``.venv/bin/python -m bench.sdk [--quick]`` prints the overhead table:

* per model call: a real ``openai.OpenAI`` client's ``chat.completions.create`` wrapped by
  ``replaybook.wrap`` inside a run, against the same call on an unwrapped client. The client
  answers from an in-process transport (``httpx.MockTransport``, a canned realistic chat
  completion with a tool call), so the figures are the SDK's cost and not network jitter; the
  request is a realistic support conversation (a 1 KB system prompt, 10 messages of chat text,
  two tool schemas);
* per tool call: a ``@replaybook.tool`` READ and a WRITE (its intent fsync'ed to the spool
  before the function runs) against the undecorated function;
* memory with the server down: the SDK's peak traced allocation (``tracemalloc``, every thread)
  while 10,000 events are recorded with nothing answering, against 1,000 events, in a process
  of its own after a warm-up of 20 events (``memory_down_apart``).

The SDK's sender posts to a server in its own process while the calls are timed: a sink that
takes every request (``SINK``), so that the API's ingestion work, which runs elsewhere in
production, does not compete with the agent for this machine's cores (``api_process`` starts
the real API for comparison, ``--api``). Overheads are differences of the wrapped and bare
per-call percentiles, bare and wrapped calls interleaved in rounds (the order alternating);
each figure is the median over the rounds, with the spread (min–max) beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import replaybook

from bench.common import TABLE_HEADER, Row, emit, interleaved, machine_load
from devstack.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-sdk-token"
GOAL_P50_MS, GOAL_P99_MS, GOAL_SHARE = 0.5, 5.0, 0.01
#: the SDK's memory bound with the server down: the sender holds one batch (1 MiB) read from
#: the spool and the request built of it, besides the runs' small state
MEMORY_BOUND = 4 * 2**20
#: the model call the share of overhead is taken of
MODEL_CALL_MS = 100.0

_WORDS = (
    "order refund customer shipment tracking invoice address delivered delayed damaged "
    "package replacement policy days within receipt account email confirm please thanks "
    "the a of to and in for on with is was by this that from your my we can will"
).split()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def conversation(seed: int = 29) -> list[Any]:
    """A support chat as an agent sends it: system prompt, user turns, tool calls, results."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": _text(rng, 170)}]
    for turn in range(3):
        messages.append({"role": "user", "content": _text(rng, 40)})
        call_id = f"call_{turn}"
        args = json.dumps({"order_id": f"A-{100 + turn}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": args},
                    }
                ],
            }
        )
        result = {"order_id": f"A-{100 + turn}", "status": "delivered", "note": _text(rng, 30)}
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    messages.append({"role": "user", "content": _text(rng, 25)})
    return messages


def completion_body(seed: int = 30) -> bytes:
    rng = random.Random(seed)
    arguments = json.dumps({"order_id": "A-102", "amount": 42.5, "reason": _text(rng, 12)})
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1,
            "model": "bench-model",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": _text(rng, 60),
                        "tool_calls": [
                            {
                                "id": "call_refund",
                                "type": "function",
                                "function": {"name": "refund", "arguments": arguments},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 812, "completion_tokens": 96, "total_tokens": 908},
        }
    ).encode()


def _client(body: bytes) -> openai.OpenAI:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/json"})

    return openai.OpenAI(
        base_url="http://model.invalid/v1",
        api_key="bench",
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),  # type: ignore[arg-type]
        max_retries=0,
    )


@replaybook.tool(side_effect="read")
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "status": "delivered", "total": 42.5, "currency": "EUR"}


@replaybook.tool(side_effect="write")
def refund(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order."""
    return {"refund_id": f"rf-{order_id}", "amount": amount, "key": replaybook.idempotency_key()}


def _bare_lookup(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "delivered", "total": 42.5, "currency": "EUR"}


def _bare_refund(order_id: str, amount: float) -> dict[str, Any]:
    return {"refund_id": f"rf-{order_id}", "amount": amount, "key": "k"}


#: a server in its own process that takes every request and records nothing: the SDK's
#: sender does its real HTTP work, and the figures do not include the API's ingestion, which
#: runs on another machine in production but would share this machine's two cores here
SINK = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self._answer()

    def _answer(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""


@contextlib.contextmanager
def sink_process() -> Iterator[str]:
    port = free_ports(1)[0]
    process = subprocess.Popen([sys.executable, "-c", SINK, str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/api/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{url} did not start")
        time.sleep(0.1)


@contextlib.contextmanager
def api_process(home: Path) -> Iterator[str]:
    """The real API over SQLite, in its own process."""
    port = free_ports(1)[0]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "TEMPORAL_"))
    } | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_API_TOKENS": f"{TOKEN}=engineer",
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
        "REPLAYBOOK_LOG_FORMAT": "json",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "api", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(fn: Callable[[], object], n: int) -> tuple[list[float], list[float]]:
    """Seconds of each of ``n`` calls: wall time, and this thread's CPU time (what the call
    costs the agent's thread, whatever else the machine is doing)."""
    wall, cpu = [], []
    for _ in range(n):
        started, started_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - started_cpu)
        wall.append(time.perf_counter() - started)
    return wall, cpu


def overheads(
    bare: Callable[[], object], wrapped: Callable[[], object], rounds: int, calls: int
) -> dict[str, list[float]]:
    """Per round: the bare p50/p99 and the wrapped-minus-bare p50/p99, in seconds. Each round
    is one run of the SDK (``calls`` wrapped calls recorded)."""
    out: dict[str, list[float]] = {
        "bare50": [],
        "bare99": [],
        "over50": [],
        "over99": [],
        "cpu50": [],
        "barecpu50": [],
    }
    _timed(bare, 20)
    for r in range(rounds):
        with replaybook.run(agent="bench-sdk", tools=[lookup_order, refund]):
            _timed(wrapped, 20)  # warm up (the run's header goes with the first event)
            if r % 2 == 0:
                plain, recorded = _timed(bare, calls), _timed(wrapped, calls)
            else:
                recorded, plain = _timed(wrapped, calls), _timed(bare, calls)
        (plain_wall, plain_cpu), (recorded_wall, recorded_cpu) = plain, recorded
        out["bare50"].append(_percentile(plain_wall, 0.5))
        out["bare99"].append(_percentile(plain_wall, 0.99))
        out["over50"].append(_percentile(recorded_wall, 0.5) - _percentile(plain_wall, 0.5))
        out["over99"].append(_percentile(recorded_wall, 0.99) - _percentile(plain_wall, 0.99))
        out["cpu50"].append(_percentile(recorded_cpu, 0.5) - _percentile(plain_cpu, 0.5))
        out["barecpu50"].append(_percentile(plain_cpu, 0.5))
    return out


def _ms(values: list[float]) -> str:
    return (
        f"{statistics.median(values) * 1e3:.3f} ms "
        f"({min(values) * 1e3:.3f}–{max(values) * 1e3:.3f})"
    )


def _rows(name: str, times: dict[str, list[float]], share: bool) -> list[Row]:
    over50, over99 = statistics.median(times["over50"]), statistics.median(times["over99"])
    bare50, bare99 = statistics.median(times["bare50"]), statistics.median(times["bare99"])
    rows = [
        Row(
            figure=f"SDK overhead per {name}, p50",
            value=_ms(times["over50"]),
            baseline=f"bare call p50 {bare50 * 1e3:.3f} ms",
            ratio=(bare50 + over50) / bare50,
            goal=f"<= {GOAL_P50_MS} ms",
            met=over50 * 1e3 <= GOAL_P50_MS,
            load=machine_load(),
        ),
        Row(
            figure=f"SDK overhead per {name}, p99",
            value=_ms(times["over99"]),
            baseline=f"bare call p99 {bare99 * 1e3:.3f} ms",
            ratio=(bare99 + over99) / bare99,
            goal=f"<= {GOAL_P99_MS} ms",
            met=over99 * 1e3 <= GOAL_P99_MS,
            load=machine_load(),
        ),
    ]
    rows.append(
        Row(
            figure=f"SDK overhead per {name}, p50, the agent thread's CPU",
            value=_ms(times["cpu50"]),
            baseline=f"bare call CPU p50 {statistics.median(times['barecpu50']) * 1e3:.3f} ms "
            f"(wall {bare50 * 1e3:.3f} ms: the machine's load)",
            ratio=None,
            goal=f"<= {GOAL_P50_MS} ms",
            met=statistics.median(times["cpu50"]) * 1e3 <= GOAL_P50_MS,
            load=machine_load(),
        )
    )
    if share:
        rows.append(
            Row(
                figure=f"SDK overhead per {name} (p50) / a {MODEL_CALL_MS:g} ms model call",
                value=f"{over50 * 1e3 / MODEL_CALL_MS:.2%}",
                baseline=f"{MODEL_CALL_MS:g} ms",
                ratio=None,
                goal=f"<= {GOAL_SHARE:.0%}",
                met=over50 * 1e3 / MODEL_CALL_MS <= GOAL_SHARE,
                load=machine_load(),
            )
        )
    return rows


def recording_work(rounds: int) -> Row:
    """The SDK's own work per model call (the recording of a response the client already
    parsed), in the agent thread's CPU time: the overhead without the model call's noise."""
    from replaybook._openai import _ChatRecording

    client = _client(completion_body())
    messages, tools = conversation(), [lookup_order.schema, refund.schema]
    response = client.chat.completions.create(model="bench-model", messages=messages)
    request = {"model": "bench-model", "messages": messages, "tools": tools, "temperature": 0.2}
    with replaybook.run(agent="bench-sdk-work") as run:
        times = interleaved(
            {
                "record": lambda: _ChatRecording(run, request).record(response),
                "json": lambda: json.dumps(messages),
            },
            rounds=rounds,
            round_s=0.2,
            clock=time.thread_time,
        )
    return Row(
        figure="SDK recording work per model call (agent thread CPU)",
        value=f"{times['record'] * 1e3:.3f} ms",
        baseline=f"json.dumps of the request's messages {times['json'] * 1e3:.3f} ms",
        ratio=times["record"] / times["json"],
        goal=f"<= {GOAL_P50_MS} ms",
        met=times["record"] * 1e3 <= GOAL_P50_MS,
        load=machine_load(),
    )


def _record_events(events: int) -> None:
    """A run of ``events`` events (model calls and READ tool calls in turn)."""
    client = replaybook.wrap(_client(completion_body()))
    messages = conversation()
    with replaybook.run(agent="bench-sdk-down", tools=[lookup_order, refund]):
        for i in range(events // 2):
            client.chat.completions.create(model="bench-model", messages=messages)
            lookup_order(f"A-{i}")


def memory_down(spool: Path, small: int, large: int) -> Row:
    """Peak traced memory while ``small`` then ``large`` events are recorded, server down."""
    replaybook.configure(url="http://127.0.0.1:1", token=TOKEN, spool_dir=spool, strict=False)
    _record_events(20)  # warm up: the client's and the SDK's first-call imports and caches
    peaks = {}
    tracemalloc.start()
    for events in (small, large):
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        _record_events(events)
        peaks[events] = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    spooled = sum(p.stat().st_size for p in spool.glob("*.jsonl"))
    return Row(
        figure=f"SDK memory, server down, {large:,} events (spool {spooled / 1e6:.1f} MB on disk)",
        value=f"peak +{peaks[large] / 1024:.0f} KiB",
        baseline=f"{small:,} events: peak +{peaks[small] / 1024:.0f} KiB",
        ratio=peaks[large] / peaks[small],
        goal=f"<= {MEMORY_BOUND // 2**20} MiB whatever the events (2 batches + state)",
        met=peaks[large] <= MEMORY_BOUND,
        load=machine_load(),
    )


#: ``memory_down`` in a process of its own: its SDK keeps the runs it could not send (the server
#: is down) and gives up on them when it exits, instead of finding their spool files deleted
#: under it later in this process ("its spool file is gone ... what was not sent yet is lost")
_MEMORY_DOWN = (
    "import json, sys; from pathlib import Path; from bench.sdk import memory_down; "
    "print(json.dumps(memory_down(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))"
    ".as_dict()))"
)


def memory_down_apart(spool: Path, small: int, large: int) -> Row:
    """``memory_down`` run in a child process (the row it prints)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEMORY_DOWN, str(spool), str(small), str(large)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return Row(**json.loads(done.stdout.strip().splitlines()[-1]))


def main(
    rounds: int = 5, calls: int = 400, small: int = 1_000, large: int = 10_000, api: bool = False
) -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-sdk-") as tmp:
        home = Path(tmp)
        with api_process(home / "api") if api else sink_process() as url:
            replaybook.configure(url=url, token=TOKEN, spool_dir=home / "spool", strict=False)
            body, messages = completion_body(), conversation()
            bare_client, wrapped_client = _client(body), replaybook.wrap(_client(body))
            tools: list[Any] = [lookup_order.schema, refund.schema]

            def bare_call() -> object:
                return bare_client.chat.completions.create(
                    model="bench-model",
                    messages=messages,
                    tools=tools,
                    temperature=0.2,
                )

            def wrapped_call() -> object:
                return wrapped_client.chat.completions.create(
                    model="bench-model",
                    messages=messages,
                    tools=tools,
                    temperature=0.2,
                )

            cases = [
                ("model call", bare_call, wrapped_call, calls, True),
                (
                    "READ tool call",
                    lambda: _bare_lookup("A-7"),
                    lambda: lookup_order("A-7"),
                    calls * 5,
                    False,
                ),
                (
                    "WRITE tool call (fsync'ed intent)",
                    lambda: _bare_refund("A-7", 4.5),
                    lambda: refund("A-7", 4.5),
                    calls,
                    False,
                ),
            ]
            rows.append(emit(recording_work(rounds)))
            for name, bare, wrapped, n, share in cases:
                for row in _rows(name, overheads(bare, wrapped, rounds, n), share):
                    rows.append(emit(row))
            if not replaybook.flush(120):
                print("(the sink did not take every event within 120 s)", flush=True)
        rows.append(emit(memory_down_apart(home / "spool-down", small, large)))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.sdk", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 rounds, fewer calls")
    parser.add_argument("--api", action="store_true", help="send to the real API, not the sink")
    args = parser.parse_args()
    print(TABLE_HEADER, flush=True)
    if args.quick:
        main(rounds=3, calls=100, small=200, large=2_000, api=args.api)
    else:
        main(api=args.api)
