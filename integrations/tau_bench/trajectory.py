"""Reading tau-bench runs (OpenAI chat messages with tool calls) into ``ForensicsRun`` records.

Pure functions over already-loaded JSON, so the same code serves the raw benchmark files (tests,
``evaluate`` on a file) and the runs the importer recorded in the ledger.

Why calls are paired with answers by position and not only by id: ``tool_call_id`` is not
unique in this data, not even within a run (an id is reused, sometimes for another tool). The
answers to an assistant message's calls are the tool messages that follow it, in order; an id
only disambiguates inside that block.
"""

from __future__ import annotations

import json
from typing import Any

from integrations.tau_bench.forensics import ExpectedAction, ForensicsRun, ToolCallFact
from models.errors import InvalidInputError

__all__ = ["parse_arguments", "run_from_tau_record", "tool_calls", "tool_schemas"]


def parse_arguments(text: Any) -> tuple[Any, bool]:
    """(arguments, invalid): a call's JSON-string arguments as a fresh object."""
    if isinstance(text, dict):
        return json.loads(json.dumps(text)), False  # a copy: never alias recorded objects
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return text, True
    return value, not isinstance(value, dict)


def tool_calls(messages: list[dict[str, Any]], write_tools: set[str]) -> list[ToolCallFact]:
    """Every tool call of the conversation with its recorded answer."""
    calls: list[ToolCallFact] = []
    for i, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        block = []  # the tool messages answering this assistant message
        for j in range(i + 1, len(messages)):
            if messages[j].get("role") != "tool":
                break
            block.append(j)
        free = list(block)
        for position, call in enumerate(message["tool_calls"]):
            function = call.get("function") or {}
            name = function.get("name") or ""
            answer = next(
                (j for j in free if messages[j].get("tool_call_id") == call.get("id")), None
            )
            if answer is None and position < len(block) and block[position] in free:
                answer = block[position]
            if answer is not None:
                free.remove(answer)
            arguments, invalid = parse_arguments(function.get("arguments"))
            output = messages[answer].get("content") if answer is not None else None
            calls.append(
                ToolCallFact(
                    assistant_index=i,
                    tool_index=answer,
                    call_id=call.get("id"),
                    name=name,
                    arguments=arguments,
                    arguments_invalid=invalid,
                    output=output if isinstance(output, str) else None,
                    is_write=name in write_tools,
                )
            )
    return calls


#: how a tau-bench episode ends: the simulated user says this, or the agent hands over
STOP_MARKER = "###STOP###"
HANDOFF_TOOL = "transfer_to_human_agents"


def episode_finished(messages: list[dict[str, Any]], calls: list[ToolCallFact]) -> bool:
    """A conversation that reached its end; one cut by the step limit was never scored."""
    last = messages[-1] if messages else {}
    if last.get("role") == "user" and STOP_MARKER in str(last.get("content") or ""):
        return True
    return any(c.name == HANDOFF_TOOL for c in calls)


def agent_texts(messages: list[dict[str, Any]]) -> tuple[tuple[int, str], ...]:
    return tuple(
        (i, m["content"])
        for i, m in enumerate(messages)
        if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"]
    )


def tool_schemas(tools_info: dict[str, Any], domain: str) -> tuple[set[str], dict[str, Any]]:
    """(write tool names, tool name -> parameters schema) from a ``tools_info.json`` document.

    Schemas exist per benchmark commit; a tool's parameters are taken from the first commit that
    has it (they are the same at every commit in the data seen so far)."""
    try:
        writes = set(tools_info["write_tools"][domain])
    except (KeyError, TypeError):
        raise InvalidInputError(f"tools info has no write_tools for domain {domain!r}") from None
    schemas: dict[str, Any] = {}
    for per_domain in (tools_info.get("schemas") or {}).values():
        for tool in per_domain.get(domain, []):
            function = tool.get("function", tool)
            schemas.setdefault(function["name"], function.get("parameters"))
    return writes, schemas


def run_from_tau_record(
    record: dict[str, Any],
    domain: str,
    write_tools: set[str],
    schemas: dict[str, Any],
    run_id: str | None = None,
    env_version: str | None = None,
) -> ForensicsRun:
    """One element of a tau-bench results file as a ForensicsRun (``env_version``: the
    benchmark commit whose databases it was recorded against, when known)."""
    try:
        messages = record["traj"]
        task = record["info"]["task"]
    except (KeyError, TypeError):
        raise InvalidInputError("a tau-bench run needs 'traj' and 'info.task'") from None
    actions = tuple(
        ExpectedAction(name=a["name"], arguments=parse_arguments(a.get("kwargs") or {})[0])
        for a in task.get("actions") or []
    )
    task_id, trial = str(record.get("task_id")), int(record.get("trial") or 0)
    calls = tool_calls(messages, write_tools)
    return ForensicsRun(
        run_id=run_id or f"tau-{domain}-{task_id}-{trial}",
        env_version=env_version,
        domain=domain,
        task_id=task_id,
        trial=trial,
        calls=tuple(calls),
        finished=episode_finished(messages, calls),
        agent_texts=agent_texts(messages),
        expected_actions=actions,
        expected_outputs=tuple(task.get("outputs") or ()),
        write_tools=tuple(sorted(write_tools)),
        schemas=schemas,
        recorded_reward=record.get("reward"),
        n_messages=len(messages),
    )
