"""Real frameworks exporting with the real OTLP/HTTP exporter to ``POST /v1/traces``: a
PydanticAI agent (its own GenAI instrumentation, ``Agent.instrument_all``) and a LangGraph
graph (OpenInference's ``LangChainInstrumentor``), each one run with its model calls, tool
calls, offered tools and the WRITE tool named by the resource. The models are the frameworks'
fakes (``FunctionModel``, ``FakeMessagesListChatModel``): the span shapes are the frameworks';
the local model server is the examples' business."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from tests.api.otlp_support import ENGINEER, served_api, wait_for_run


class RunIds(SpanProcessor):
    """The recipe docs/otlp.md gives an agent for learning its run id: the run of a trace is
    ``otlp-`` and its trace id in hex, noted when the trace's root span ends."""

    def __init__(self) -> None:
        self.run_ids: list[str] = []

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is None:
            self.run_ids.append(f"otlp-{span.context.trace_id:032x}")


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, sqlite_url: str) -> Iterator[str]:
    with served_api(tmp_path_factory.mktemp("otlp-pydantic-ai"), sqlite_url) as url:
        yield url


def _refund_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Look the order up, refund it, answer."""
    asked = sum(1 for m in messages if isinstance(m, ModelResponse))
    if asked == 0:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "A1"}, "c1")])
    if asked == 1:
        return ModelResponse(parts=[ToolCallPart("issue_refund", {"order_id": "A1"}, "c2")])
    return ModelResponse(parts=[TextPart("Order A1 is refunded.")])


def test_a_pydantic_ai_run_becomes_one_run(base: str) -> None:
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": "refund-agent", "replaybook.write_tools": "issue_refund"}
        )
    )
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=ENGINEER))
    )
    agent = Agent(FunctionModel(_refund_model), system_prompt="You are support.", name="refunds")
    refunds: list[str] = []

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: 10 EUR"

    @agent.tool_plain
    def issue_refund(order_id: str) -> str:
        """Refund an order."""
        refunds.append(order_id)
        return f"refund {order_id} issued"

    run_ids = RunIds()
    provider.add_span_processor(run_ids)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        assert agent.run_sync("refund order A1").output == "Order A1 is refunded."
        provider.force_flush()
    finally:
        Agent.instrument_all(False)
        provider.shutdown()
    assert refunds == ["A1"] and len(run_ids.run_ids) == 1
    with httpx.Client(base_url=base, timeout=30) as http:
        run = wait_for_run(http, run_ids.run_ids[0])
    types = [e["type"] for e in run["events"]]
    assert types.count("MODEL_CALL") == 3 and types.count("TOOL_CALL") == 2
    assert run["labels"]["service"] == "refund-agent" and run["status"] == "COMPLETED"
    assert run["labels"]["agent"] == "refunds" and "OPAQUE" not in types
    writes: list[dict[str, Any]] = run["side_effects"]
    assert [w["capability_id"] for w in writes] == ["issue_refund"], writes


def test_a_langgraph_run_instrumented_by_openinference_becomes_one_run(base: str) -> None:
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from openinference.instrumentation.langchain import LangChainInstrumentor

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"order {order_id}: 10 EUR"

    model = FakeMessagesListChatModel(
        responses=[
            AIMessage(
                content="",
                tool_calls=[{"name": "lookup_order", "args": {"order_id": "A1"}, "id": "c1"}],
            ),
            AIMessage(content="Order A1 costs 10 EUR."),
        ]
    )
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([lookup_order]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    provider = TracerProvider()
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=ENGINEER))
    )
    run_ids = RunIds()
    provider.add_span_processor(run_ids)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        answer = graph.compile().invoke({"messages": [HumanMessage("price of A1?")]})
        provider.force_flush()
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    assert answer["messages"][-1].content == "Order A1 costs 10 EUR."
    with httpx.Client(base_url=base, timeout=30) as http:
        run = wait_for_run(http, run_ids.run_ids[0])
    types = [e["type"] for e in run["events"]]
    assert types.count("MODEL_CALL") == 2 and types.count("TOOL_CALL") == 1, types
    assert run["labels"]["agent"] == "LangGraph" and "service" not in run["labels"]
