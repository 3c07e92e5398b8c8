"""What the SDK records of a real ``openai`` tool loop (plain and streamed, sync and async),
checked in the server's evidence over HTTP; and that it stays light (httpx only)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import openai
import pytest
import replaybook

from tests.sdk.refund_agent import SYSTEM, lookup_order, refund, refund_agent
from tests.sdk.servers import ROOT, ApiProcess, ChatServer

SERVER_PACKAGES = {
    "temporalio",
    "sqlalchemy",
    "boto3",
    "fastapi",
    "models",
    "ingest",
    "api",
    "stores",
    "runtime",
    "worker",
    "openai",
}


def test_the_sdk_imports_no_server_package_and_depends_on_httpx_only() -> None:
    code = (
        "import sys, json, replaybook; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
        ).stdout
    )
    assert not SERVER_PACKAGES & set(loaded), SERVER_PACKAGES & set(loaded)
    project = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "replaybook-sdk"
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == ["httpx"]


def test_the_tool_schema_comes_from_the_signature_and_docstring() -> None:
    schema = lookup_order.schema["function"]
    assert schema["name"] == "lookup_order"
    assert schema["description"] == "Look an order up."
    assert schema["parameters"] == {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "the order's id, e.g. A-17"}},
        "required": ["order_id"],
    }
    params = refund.schema["function"]["parameters"]
    assert params["required"] == ["order_id", "amount"]
    assert params["properties"]["amount"] == {"type": "number"}
    assert params["properties"]["reason"]["default"] == "customer request"


def _run(api: ApiProcess, run_id: str) -> dict[str, Any]:
    with api.client() as client:
        view = client.get(f"/api/runs/{run_id}").json()
        view["verify"] = client.get(f"/api/runs/{run_id}/verify").json()
    return view


def _model_calls(api: ApiProcess, view: dict[str, Any]) -> list[dict[str, Any]]:
    """The MODEL_CALL payloads of the run (from the ledger through the API)."""
    run_id = view["run_id"]
    with api.client() as client:
        return [
            client.get(f"/api/runs/{run_id}/events/{e['sequence']}").json()["payload"]
            for e in view["events"]
            if e["type"] == "MODEL_CALL"
        ]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_tool_loop_is_recorded_as_the_generic_loop_replays_it(
    api: ApiProcess, spool: Path, chat: ChatServer, stream: bool
) -> None:
    run_id = refund_agent(chat.base_url, stream=stream)
    assert replaybook.flush(30)
    view = _run(api, run_id)
    assert view["status"] == "COMPLETED"
    assert view["outcome"] == {"ended_by": "answer"}
    assert view["verify"]["intact"] is True
    assert view["labels"]["agent"] == "refund-bot"
    assert view["pinned"]["model_profile"] == "scripted"
    assert view["pinned"]["prompt_bundle_hash"]  # the server's default from the system prompt
    assert view["environment"]["python_version"]
    # each tool call a fixture under the name the model called and the arguments it sent,
    # with the model's tool-call id
    fixtures = {f["capability_id"]: f for f in view["fixtures"]}
    assert fixtures["lookup_order"]["sanitized_request"] == {"order_id": "A-17"}
    assert fixtures["lookup_order"]["tool_call_id"] == "call_lookup_1"
    assert fixtures["refund"]["sanitized_request"] == {"order_id": "A-17", "amount": 20.5}
    assert fixtures["refund"]["side_effect_class"] == "WRITE"
    (effect,) = view["side_effects"]
    assert effect["status"] == "CONFIRMED"
    key = fixtures["refund"]["sanitized_response"]["idempotency_key"]
    assert effect["idempotency_key"] == key
    # no system message twice: the header's prompt, then the conversation
    assert [len(s["message_refs"]) for s in view["context_snapshots"]] == [2, 2, 2]
    assert len(chat.requests) == 3 and chat.requests[0]["messages"][0]["content"] == SYSTEM
    # each model call with the tool calls the model returned, its sampling and its latency
    recorded = _model_calls(api, view)
    assert [[c["name"] for c in call["response"]["tool_calls"]] for call in recorded] == [
        ["lookup_order"],
        ["refund"],
        [],
    ]
    assert recorded[1]["response"]["tool_calls"][0]["arguments"] == {
        "order_id": "A-17",
        "amount": 20.5,
    }
    assert recorded[2]["response"]["content"] == "I refunded 20.50 EUR for order A-17."
    assert all(c["seed"] == 7 for c in recorded)
    assert recorded[0]["request_parameters"]["temperature"] == 0.0
    assert recorded[0]["request_parameters"].get("stream", False) is stream
    assert recorded[0]["usage"] == {"prompt_tokens": 42, "completion_tokens": 7}
    assert all(c["latency_ms"] > 0 for c in recorded)
    # no spool file is left once the server holds the run
    assert not list(spool.glob("*.jsonl"))


async def test_async_runs_clients_and_tools_are_recorded(
    api: ApiProcess, spool: Path, chat: ChatServer
) -> None:
    @replaybook.tool(side_effect="read")
    async def lookup_order(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "total": 20.5}

    @replaybook.tool(side_effect="write", name="refund")
    async def refund_order(order_id: str, amount: float) -> str:
        return f"refunded {amount} with {replaybook.idempotency_key()}"

    tools: dict[str, Any] = {"lookup_order": lookup_order, "refund": refund_order}
    client = replaybook.wrap(openai.AsyncOpenAI(base_url=chat.base_url, api_key="none"))

    @replaybook.run(agent="async-refund-bot", tools=[lookup_order, refund_order])
    async def agent(task: str) -> str:
        messages: list[Any] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task},
        ]
        while True:
            answer = await client.chat.completions.create(model="scripted", messages=messages)
            message = answer.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return str(message.content)
            for call in message.tool_calls:
                function = call.function  # type: ignore[union-attr]
                result = await tools[function.name](**json.loads(function.arguments))
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )

    before = {r["run_id"] for r in _runs(api)}
    assert await agent("Please refund order A-17.") == "I refunded 20.50 EUR for order A-17."
    assert replaybook.flush(30)
    (run_id,) = {r["run_id"] for r in _runs(api)} - before
    view = _run(api, run_id)
    assert view["status"] == "COMPLETED" and view["verify"]["intact"]
    # what the agent did not declare came from its first model call
    assert view["prompt_artifacts"][0]["token_count"] > 0
    assert [f["capability_id"] for f in view["fixtures"]] == ["lookup_order", "refund"]
    assert view["side_effects"][0]["status"] == "CONFIRMED"
    # AsyncOpenAI's create returns a coroutine: the recorded call is what it resolved to
    recorded = _model_calls(api, view)
    assert [[c["name"] for c in call["response"]["tool_calls"]] for call in recorded] == [
        ["lookup_order"],
        ["refund"],
        [],
    ]
    assert recorded[2]["response"]["content"] == "I refunded 20.50 EUR for order A-17."
    assert all(c["latency_ms"] > 0 for c in recorded)


def _runs(api: ApiProcess) -> list[dict[str, Any]]:
    with api.client() as client:
        return client.get("/api/runs", params={"limit": 500}).json()["runs"]


def test_responses_create_is_recorded_with_its_function_calls(
    api: ApiProcess, spool: Path, chat: ChatServer
) -> None:
    client = replaybook.wrap(openai.OpenAI(base_url=chat.base_url, api_key="none"))
    inputs: list[Any] = [{"role": "user", "content": "Please refund order A-17."}]
    with replaybook.run(agent="responses-bot", system_prompt=SYSTEM) as run:
        for _ in range(3):
            response = client.responses.create(
                model="scripted",
                instructions=SYSTEM,
                input=inputs,
                tools=[lookup_order.schema["function"] | {"type": "function"}],
            )
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            for call in calls:
                inputs.append(call.model_dump(exclude_none=True))
                inputs.append(
                    {"type": "function_call_output", "call_id": call.call_id, "output": "{}"}
                )
    assert response.output_text == "I refunded 20.50 EUR for order A-17."
    assert replaybook.flush(30)
    view = _run(api, run.run_id)
    recorded = _model_calls(api, view)
    assert [[c["name"] for c in call["response"]["tool_calls"]] for call in recorded] == [
        ["lookup_order"],
        ["refund"],
        [],
    ]
    assert recorded[1]["response"]["tool_calls"][0]["id"] == "call_refund_1"
    assert recorded[2]["response"]["content"] == "I refunded 20.50 EUR for order A-17."
    assert recorded[0]["usage"] == {"prompt_tokens": 40, "completion_tokens": 6}
    # the instructions are the run's system prompt, once: the system prompt and the task,
    # then each call adds the function call and its output
    assert [len(s["message_refs"]) for s in view["context_snapshots"]] == [2, 2, 2]
