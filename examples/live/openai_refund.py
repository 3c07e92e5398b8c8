"""A plain ``openai`` SDK tool loop, recorded with ``replaybook.wrap`` + ``@replaybook.tool``:
``.venv/bin/python examples/live/openai_refund.py --json`` (with ``replaybook dev up``).

The loop sends the conversation with ``tools``, runs the tool calls the model answers with,
and stops at the first reply or after ``--max-turns`` model calls."""

from __future__ import annotations

import json
from typing import Any

import openai
import replaybook
from openai.types.chat import ChatCompletionMessageFunctionToolCall

from examples.live import desk
from examples.live.recorded_tools import TOOLS, lookup_order, refund


def tool_loop(client: openai.OpenAI, max_turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": desk.SYSTEM_PROMPT},
        {"role": "user", "content": desk.TASK},
    ]
    called: list[str] = []
    for _ in range(max_turns):
        completion = client.chat.completions.create(
            model=desk.MODEL,
            messages=messages,  # type: ignore[arg-type]
            tools=desk.TOOL_SPECS,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=desk.MAX_TOKENS,
        )
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return {"ended": "answer", "answer": message.content, "tool_calls": called}
        for call in message.tool_calls:
            assert isinstance(call, ChatCompletionMessageFunctionToolCall)  # only functions offered
            name = call.function.name
            result = TOOLS[name](**json.loads(call.function.arguments))
            called.append(name)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )
    return {"ended": "turn_cap", "answer": None, "tool_calls": called}


def main() -> None:
    args = desk.arguments(__doc__.splitlines()[0])
    where = desk.stack()
    replaybook.configure(url=where.api_url, token=where.token)
    result: dict[str, Any] = {"framework": "openai", "status": "COMPLETED"}
    try:
        with replaybook.run(
            agent="refund-bot-openai",
            system_prompt=desk.SYSTEM_PROMPT,
            tools=[lookup_order, refund],
            model=desk.MODEL,
            max_model_calls=args.max_turns,
        ) as run:
            result["run_id"] = run.run_id
            client = replaybook.wrap(openai.OpenAI(base_url=where.model_url, api_key="local"))
            result |= tool_loop(client, args.max_turns)
            run.outcome = result.get("answer")
    except Exception as exc:  # recorded FAILED by the run; said here too, never hidden
        result |= {"status": "FAILED", "error": f"{type(exc).__name__}: {exc}"}
    flushed = replaybook.flush(timeout=60)
    result["recorded"] = flushed and desk.wait_until_recorded(where, result["run_id"])
    desk.report(result, as_json=args.json)


if __name__ == "__main__":
    main()
