"""Imported tau-bench runs from the ledger, as ``ForensicsRun`` records.

The importer (``integrations.tau_bench.importer``) records each (task, trial) as a run and keeps the
ground truth; its loader gives back the messages index-aligned with the source file. This
module only adapts what the loader returns, so forensics never parses the ledger itself.
"""

from __future__ import annotations

from typing import Any

from integrations.tau_bench.forensics import ExpectedAction, ForensicsRun
from integrations.tau_bench.trajectory import (
    agent_texts,
    episode_finished,
    parse_arguments,
    tool_calls,
)
from models.errors import RunNotFoundError

__all__ = ["forensics_run_from_imported", "load_imported_runs"]


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if value is not None:
            return value
    return default


def _action(item: Any) -> ExpectedAction:
    name = _get(item, "name")
    arguments = _get(item, "arguments", "kwargs", default={})
    return ExpectedAction(name=name, arguments=parse_arguments(arguments)[0])


def _tool_facts(imported: Any) -> tuple[set[str], dict[str, Any]]:
    """Write tools and argument schemas: from the importer's recorded tools when present, else
    from ``write_tools`` / ``tool_schemas`` (the plain-dict form the tests build)."""
    tools = _get(imported, "tools", default=()) or ()
    if tools:
        writes = {t["name"] for t in tools if t.get("side_effect_class") == "WRITE"}
        return writes, {t["name"]: t.get("parameters") or {} for t in tools}
    return (
        set(_get(imported, "write_tools", default=())),
        dict(_get(imported, "tool_schemas", "schemas", default={})),
    )


def forensics_run_from_imported(imported: Any, run_id: str) -> ForensicsRun:
    """Adapt the importer's ImportedTauRun (messages, domain, task, trial, expected actions and
    outputs, recorded tools, recorded reward)."""
    messages = list(_get(imported, "messages", "traj", default=[]))
    messages = [m.model_dump(mode="json") if hasattr(m, "model_dump") else m for m in messages]
    write_tools, schemas = _tool_facts(imported)
    calls = tool_calls(messages, write_tools)
    return ForensicsRun(
        run_id=run_id,
        domain=str(_get(imported, "domain")),
        task_id=str(_get(imported, "task_id")),
        trial=int(_get(imported, "trial", default=0)),
        calls=tuple(calls),
        agent_texts=agent_texts(messages),
        expected_actions=tuple(_action(a) for a in _get(imported, "expected_actions", default=())),
        expected_outputs=tuple(_get(imported, "expected_outputs", default=())),
        write_tools=tuple(sorted(write_tools)),
        schemas=schemas,
        recorded_reward=_get(imported, "reward", "recorded_reward"),
        env_version=_get(imported, "env_version"),
        n_messages=len(messages),
        finished=episode_finished(messages, calls),
    )


async def load_imported_runs(stores: Any, run_id: str | None = None) -> list[ForensicsRun]:
    """One imported run (``run_id``) or every imported tau-bench run in the store."""
    from integrations.tau_bench import importer as tau_bench

    async def load(rid: str) -> ForensicsRun:
        try:
            imported = await tau_bench.load_tau_run(
                stores.ledger, stores.artifacts, stores.evidence, rid
            )
        except RunNotFoundError:
            raise RunNotFoundError(f"no imported tau-bench run {rid!r}") from None
        return forensics_run_from_imported(imported, rid)

    if run_id is not None:
        return [await load(run_id)]
    return [await load(rid) for rid in await tau_bench.list_tau_runs(stores.ledger)]
