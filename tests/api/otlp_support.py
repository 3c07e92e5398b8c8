"""What the OTLP receiver's tests share: the API served by uvicorn in a thread (the real
exporter speaks HTTP), traces made by the real OpenTelemetry SDK, and polling for a run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from devstack.ports import free_ports
from worker.settings import Settings

TOKENS = {
    "eng-token": frozenset({Role.ENGINEER}),
    "view-token": frozenset({Role.VIEWER}),
}
ENGINEER = {"Authorization": "Bearer eng-token"}
VIEWER = {"Authorization": "Bearer view-token"}
IDLE_SECONDS = 1.0
MAX_INGEST_BYTES = 256 * 1024


@contextmanager
def served_api(home: Path, database_url: str) -> Iterator[str]:
    """The API over ``database_url``, served on a free port until the block exits."""
    settings = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # nothing here needs Temporal
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_OTLP_IDLE_SECONDS": str(IDLE_SECONDS),
        }
    )
    config = ApiConfig(tokens=TOKENS, max_ingest_bytes=MAX_INGEST_BYTES)
    app = create_app(settings, config)
    (port,) = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def finished_spans(make: Any) -> list[ReadableSpan]:
    """The spans ``make(tracer)`` ends, in the order they ended (as an exporter sees them)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make(provider.get_tracer("replaybook-tests"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _messages(*parts: dict[str, Any], role: str = "assistant") -> str:
    import json

    return json.dumps([{"role": role, "parts": list(parts)}])


def genai_agent(tracer: trace.Tracer, *, end_root: bool = True, unknown: bool = False) -> None:
    """A PydanticAI-shaped GenAI trace: invoke_agent → chat (asks for a tool) → execute_tool →
    chat (answers); ``unknown`` adds a span no convention describes."""
    root = tracer.start_span(
        "invoke_agent support",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"},
    )
    inside = trace.set_span_in_context(root)
    first_input = (
        '[{"role":"system","parts":[{"type":"text","content":"You are support."}]},'
        '{"role":"user","parts":[{"type":"text","content":"refund order A1"}]}]'
    )
    call = {"type": "tool_call", "id": "c1", "name": "lookup_order", "arguments": {"id": "A1"}}
    chats = [
        (first_input, _messages(call)),
        (first_input, _messages({"type": "text", "content": "Order A1 is refunded."})),
    ]
    for n, (inputs, outputs) in enumerate(chats):
        with tracer.start_as_current_span(
            "chat smollm2",
            context=inside,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "smollm2",
                "gen_ai.input.messages": inputs,
                "gen_ai.output.messages": outputs,
                "gen_ai.usage.input_tokens": 40 + n,
                "gen_ai.usage.output_tokens": 5,
            },
        ):
            pass
        if n == 0:
            with tracer.start_as_current_span(
                "execute_tool lookup_order",
                context=inside,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup_order",
                    "gen_ai.tool.call.id": "c1",
                    "gen_ai.tool.call.arguments": '{"id":"A1"}',
                    "gen_ai.tool.call.result": "order A1: 10 EUR",
                },
            ):
                pass
    if unknown:
        with tracer.start_as_current_span(
            "db.query", context=inside, attributes={"db.statement": "select 1"}
        ):
            pass
    if end_root:
        root.end()


def openinference_agent(tracer: trace.Tracer) -> None:
    """An OpenInference (LangGraph-shaped) trace: CHAIN → LLM (tool call) → TOOL → LLM."""
    with tracer.start_as_current_span("LangGraph", attributes={"openinference.span.kind": "CHAIN"}):
        with tracer.start_as_current_span(
            "ChatOpenAI",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "smollm2",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "refund order A1",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": "{}",
                "llm.token_count.prompt": 12,
                "llm.token_count.completion": 3,
            },
        ):
            pass
        with tracer.start_as_current_span(
            "lookup",
            attributes={
                "openinference.span.kind": "TOOL",
                "tool.name": "lookup",
                "input.value": "{}",
                "output.value": "order A1",
            },
        ):
            pass
        with tracer.start_as_current_span(
            "ChatOpenAI",
            attributes={
                "openinference.span.kind": "LLM",
                "llm.model_name": "smollm2",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "Refunded.",
            },
        ):
            pass


def trace_id_of(spans: list[ReadableSpan]) -> str:
    return format(spans[0].context.trace_id, "032x")


def wait_for_run(client: httpx.Client, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """The run once it has ended (polled: assembly runs after the export is answered)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(f"/api/runs/{run_id}", headers=VIEWER)
        if answer.status_code == 200 and answer.json()["status"] != "RUNNING":
            run: dict[str, Any] = answer.json()
            return run
        assert answer.status_code in (200, 404), answer.text
        assert time.monotonic() < deadline, f"run {run_id} did not appear: {answer.text}"
        time.sleep(0.05)


def write_trace_pb(path: Path) -> str:
    """The recipe of docs/otlp.md: a GenAI trace made by the OpenTelemetry SDK, encoded by
    the OTLP exporter's own encoder into ``path``; returns the run id it becomes."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = finished_spans(genai_agent)
    path.write_bytes(encode_spans(spans).SerializeToString())
    return f"otlp-{trace_id_of(spans)}"
