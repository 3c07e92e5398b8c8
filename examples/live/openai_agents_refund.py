"""The OpenAI Agents SDK (``openai-agents``), recorded through the Replaybook SDK:
``.venv/bin/python examples/live/openai_agents_refund.py --json`` (with ``replaybook dev up``).

The agent's model is ``OpenAIChatCompletionsModel`` over a wrapped ``AsyncOpenAI`` client
pointed at the local server; its tools are the desk's ``@replaybook.tool`` functions made
``function_tool``s. Tracing export to OpenAI is off (``set_tracing_disabled``). The run stops
at the agent's final output or after ``--max-turns`` (``MaxTurnsExceeded``: a clean end,
reported as ``turn_cap``)."""

from __future__ import annotations

import asyncio
from typing import Any

import replaybook
from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from examples.live import desk
from examples.live.recorded_tools import lookup_order, refund


async def run_agent(client: AsyncOpenAI, max_turns: int) -> dict[str, Any]:
    agent = Agent(
        name="refund-bot",
        instructions=desk.SYSTEM_PROMPT,
        tools=[function_tool(lookup_order), function_tool(refund)],
        model=OpenAIChatCompletionsModel(model=desk.MODEL, openai_client=client),
        model_settings=ModelSettings(temperature=0, max_tokens=desk.MAX_TOKENS),
    )
    try:
        result = await Runner.run(agent, desk.TASK, max_turns=max_turns)
    except MaxTurnsExceeded:
        return {"ended": "turn_cap", "answer": None}
    return {"ended": "answer", "answer": str(result.final_output)}


async def main() -> None:
    args = desk.arguments(__doc__.splitlines()[0])
    where = desk.stack()
    set_tracing_disabled(True)
    replaybook.configure(url=where.api_url, token=where.token)
    result: dict[str, Any] = {"framework": "openai-agents", "status": "COMPLETED"}
    try:
        async with replaybook.run(
            agent="refund-bot-openai-agents",
            system_prompt=desk.SYSTEM_PROMPT,
            tools=[lookup_order, refund],
            model=desk.MODEL,
            max_model_calls=args.max_turns,
        ) as run:
            result["run_id"] = run.run_id
            client = replaybook.wrap(AsyncOpenAI(base_url=where.model_url, api_key="local"))
            result |= await run_agent(client, args.max_turns)
            run.outcome = result.get("answer")
    except Exception as exc:  # recorded FAILED by the run; said here too, never hidden
        result |= {"status": "FAILED", "error": f"{type(exc).__name__}: {exc}"}
    flushed = replaybook.flush(timeout=60)
    result["recorded"] = flushed and desk.wait_until_recorded(where, result["run_id"])
    desk.report(result, as_json=args.json)


if __name__ == "__main__":
    asyncio.run(main())
