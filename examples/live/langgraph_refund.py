"""LangGraph (``langgraph`` + ``langchain-openai``), recorded through the Replaybook SDK:
``.venv/bin/python examples/live/langgraph_refund.py --json`` (with ``replaybook dev up``).

A two-node graph (the model, then ``ToolNode`` while the model calls tools) over
``ChatOpenAI``, whose OpenAI client is a wrapped one (``replaybook.wrap``). The model streams
(``streaming=True``, usage included): the server's SSE tool calls are assembled by LangChain,
and the SDK records the assembled answer. Recorded through the SDK rather than OpenInference
and OTLP: the refund's intent is then write-ahead with its idempotency key, and the catalog
carries each tool's side-effect class, which no OpenInference span says. The graph stops at
the first reply or after ``--max-turns`` model calls (``GraphRecursionError``: ``turn_cap``)."""

from __future__ import annotations

from typing import Any

import openai
import replaybook
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from examples.live import desk
from examples.live.recorded_tools import lookup_order, refund


def build_graph(client: openai.OpenAI) -> Any:
    tools = [tool(lookup_order), tool(refund)]
    # (the pydantic mypy plugin knows no field aliases: model, api_key)
    llm = ChatOpenAI(  # type: ignore[call-arg]
        model=desk.MODEL,
        client=client.chat.completions,
        root_client=client,
        temperature=0,
        max_tokens=desk.MAX_TOKENS,
        streaming=True,
        stream_usage=True,
        api_key="local",
    ).bind_tools(tools)

    def model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def run_graph(client: openai.OpenAI, max_turns: int) -> dict[str, Any]:
    graph = build_graph(client)
    messages = [("system", desk.SYSTEM_PROMPT), ("user", desk.TASK)]
    try:
        # one model step and one tool step per turn; the last turn's model step ends it
        state = graph.invoke({"messages": messages}, {"recursion_limit": 2 * max_turns})
    except GraphRecursionError:
        return {"ended": "turn_cap", "answer": None}
    last = state["messages"][-1]
    answer = last.content if isinstance(last, AIMessage) else None
    return {"ended": "answer", "answer": answer}


def main() -> None:
    args = desk.arguments(__doc__.splitlines()[0])
    where = desk.stack()
    replaybook.configure(url=where.api_url, token=where.token)
    result: dict[str, Any] = {"framework": "langgraph", "status": "COMPLETED"}
    try:
        with replaybook.run(
            agent="refund-bot-langgraph",
            system_prompt=desk.SYSTEM_PROMPT,
            tools=[lookup_order, refund],
            model=desk.MODEL,
            max_model_calls=args.max_turns,
        ) as run:
            result["run_id"] = run.run_id
            client = replaybook.wrap(openai.OpenAI(base_url=where.model_url, api_key="local"))
            result |= run_graph(client, args.max_turns)
            run.outcome = result.get("answer")
    except Exception as exc:  # recorded FAILED by the run; said here too, never hidden
        result |= {"status": "FAILED", "error": f"{type(exc).__name__}: {exc}"}
    flushed = replaybook.flush(timeout=60)
    result["recorded"] = flushed and desk.wait_until_recorded(where, result["run_id"])
    desk.report(result, as_json=args.json)


if __name__ == "__main__":
    main()
