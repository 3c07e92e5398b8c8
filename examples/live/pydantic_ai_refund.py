"""PydanticAI (``pydantic-ai-slim[openai]``), recorded through its own OpenTelemetry
instrumentation and Replaybook's OTLP receiver (``POST /v1/traces``):
``.venv/bin/python examples/live/pydantic_ai_refund.py --json`` (with ``replaybook dev up``).

Nothing of Replaybook is imported: the agent exports its spans with the real
``OTLPSpanExporter`` to the API, with the token as a bearer header. The resource names the
WRITE tool (``replaybook.write_tools``), which no span says. A trace becomes the run
``otlp-<trace id>``; the example waits until the API holds it ended, then prints its id. The
run stops at the first reply or after ``--max-turns`` model requests (``UsageLimitExceeded``:
``turn_cap``)."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from examples.live import desk


class RootSpans(SpanProcessor):
    """The run ids of the traces whose root span ended (``otlp-`` + the trace id in hex)."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is None and span.context is not None:
            self.run_ids.append(f"otlp-{span.context.trace_id:032x}")


def build_agent(model_url: str) -> Agent[None, str]:
    model = OpenAIChatModel(
        desk.MODEL, provider=OpenAIProvider(base_url=model_url, api_key="local")
    )
    agent = Agent(
        model,
        name="refund-bot-pydantic-ai",
        system_prompt=desk.SYSTEM_PROMPT,
        model_settings={"temperature": 0, "max_tokens": desk.MAX_TOKENS},
    )
    refunds = 0

    @agent.tool_plain
    def lookup_order(order_id: str) -> dict[str, Any]:
        """Look up an order by its id: customer, item, status, amount paid."""
        return desk.lookup(order_id)

    @agent.tool_plain
    def refund(order_id: str, amount: float) -> dict[str, Any]:
        """Refund an amount of an order to the customer."""
        nonlocal refunds
        refunds += 1  # no idempotency key from the framework: one per call of this process
        return desk.make_refund(order_id, amount, f"pydantic-ai-{time.time_ns()}-{refunds}")

    return agent


def run_agent(model_url: str, max_turns: int) -> dict[str, Any]:
    agent = build_agent(model_url)
    try:
        result = agent.run_sync(desk.TASK, usage_limits=UsageLimits(request_limit=max_turns))
    except UsageLimitExceeded:
        return {"ended": "turn_cap", "answer": None}
    return {"ended": "answer", "answer": result.output}


def main() -> None:
    args = desk.arguments(__doc__.splitlines()[0])
    where = desk.stack()
    headers = {"Authorization": f"Bearer {where.token}"} if where.token else {}
    resource = Resource.create(
        {"service.name": "refund-bot-pydantic-ai", "replaybook.write_tools": "refund"}
    )
    provider = TracerProvider(resource=resource)
    exporter = OTLPSpanExporter(endpoint=f"{where.api_url}/v1/traces", headers=headers)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    roots = RootSpans()
    provider.add_span_processor(roots)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    result: dict[str, Any] = {"framework": "pydantic-ai", "status": "COMPLETED"}
    try:
        result |= run_agent(where.model_url, args.max_turns)
    except Exception as exc:  # the trace records the error; said here too, never hidden
        result |= {"status": "FAILED", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        exported = provider.force_flush()
        provider.shutdown()
    result["run_id"] = roots.run_ids[0] if roots.run_ids else None
    result["recorded"] = bool(
        exported and result["run_id"] and desk.wait_until_recorded(where, result["run_id"])
    )
    desk.report(result, as_json=args.json)


if __name__ == "__main__":
    main()
