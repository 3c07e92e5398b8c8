"""tau2-bench results → the tau-bench importer's runs, one per simulation.

A tau2-bench results file (``Results``: ``info``, ``tasks``, ``simulations``) holds one
``SimulationRun`` per (task, trial): ``messages`` (assistant, user and tool messages; tool calls
as ``{id, name, arguments (an object), requestor}``; a tool message answers a call by ``id``
and says ``error`` when it failed), ``reward_info`` (``reward`` and its breakdown) and
``termination_reason`` (``user_stop``, ``agent_stop``, ``max_steps``, …). Each simulation is
rewritten as a tau-bench record — OpenAI chat messages with the domain policy as the system
message, the task's expected assistant actions as ground truth — and recorded by the
tau-bench importer (``integrations.tau_bench.importer``), so forensics, replay and the side-effect
ledger treat both the same way. Labels keep ``format: tau2-bench`` and the termination reason.

What differs and how it is kept: tau2 opens every conversation with a fixed agent greeting that
no model produced; it is left out (the conversation starts with the user, as in tau-bench). A
failed tool answer (``error: true``) that does not already
say so is prefixed ``Error: `` (the marker the importer reads as a failed, changeless write);
tools the *user* calls (tau2's telecom domain) are not the agent's: their calls and answers (and
a user turn that only called them) are left out of the agent's conversation and counted in the
report. The tools and which are writes
come from ``--tools-info`` (tau-bench's format) or from the file's ``tool_defs`` with
``--write-tools``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest.import_common import (
    ConvertedRun,
    ImportReport,
    check_number,
    read_json_file,
    record_converted,
)
from integrations.tau_bench.importer import (
    ToolsInfo,
    convert_tau_run,
    declared_tools,
    load_tools_info,
)
from models.errors import InvalidInputError
from runtime.ports import ArtifactStore, EvidenceReader, IngestLedger

__all__ = ["convert_tau2_file", "import_tau2_bench", "tau_record"]


def _agent_message(message: dict[str, Any]) -> dict[str, Any]:
    calls = [
        c for c in message.get("tool_calls") or () if c.get("requestor", "assistant") != "user"
    ]
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if calls:
        out["tool_calls"] = [
            {
                "id": str(c.get("id") or ""),
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})},
            }
            for c in calls
        ]
    return out


def _tool_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if message.get("error") and not (isinstance(content, str) and content.startswith("Error")):
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": str(message.get("id") or ""), "content": content}


def tau_record(
    simulation: dict[str, Any],
    task: dict[str, Any] | None,
    policy: str | None,
    where: str = "simulation",
) -> tuple[dict[str, Any], int]:
    """A simulation as a tau-bench record, and how many user tool messages were left out. A
    message of another role than assistant, user, tool or system is refused naming it
    (``where``)."""
    traj: list[dict[str, Any]] = [{"role": "system", "content": policy}] if policy else []
    left_out = 0
    for index, message in enumerate(simulation.get("messages") or ()):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("assistant", "user", "tool", "system"):
            raise InvalidInputError(
                f"{where}.messages[{index}].role: {role!r} is not assistant, user, tool or system"
            )
        if role == "system":  # kept: the tau-bench importer reads or reports it
            traj.append({"role": "system", "content": message.get("content")})
            continue
        if (
            role == "assistant"
            and not any(m["role"] == "user" for m in traj)
            and not message.get("tool_calls")
        ):
            continue  # tau2's fixed opening greeting: the simulator's, not a model call
        if role == "assistant":
            traj.append(_agent_message(message))
        elif role == "user" and message.get("content") is None and message.get("tool_calls"):
            left_out += 1  # a turn in which the user only used their own tools
        elif role == "user":
            traj.append({"role": "user", "content": message.get("content")})
        elif role == "tool" and message.get("requestor", "assistant") == "user":
            left_out += 1
        elif role == "tool":
            traj.append(_tool_message(message))
    criteria = (task or {}).get("evaluation_criteria") or {}
    actions = [
        {"name": a["name"], "kwargs": a.get("arguments") or {}}
        for a in criteria.get("actions") or ()
        if a.get("requestor", "assistant") == "assistant"
    ]
    reward_info = simulation.get("reward_info") or {}
    record = {
        "task_id": simulation.get("task_id"),
        "trial": simulation.get("trial") or 0,
        "reward": reward_info.get("reward"),
        "info": {
            "task": {"actions": actions, "outputs": criteria.get("communicate_info") or []},
            "reward_info": reward_info or None,
            "termination_reason": simulation.get("termination_reason"),
        },
        "traj": traj,
    }
    return record, left_out


def _tool_defs(info: dict[str, Any], write_tools: list[str] | None) -> ToolsInfo:
    defs = ((info.get("environment_info") or {}).get("tool_defs")) or {}
    if not defs or write_tools is None:
        raise InvalidInputError(
            "tau2-bench: give --tools-info, or --write-tools with a file whose "
            "info.environment_info.tool_defs lists the tools"
        )
    schemas = tuple(
        {
            "name": d.get("name", name),
            "description": d.get("doc") or "",
            "parameters": d.get("params") or {"type": "object"},
        }
        for name, d in defs.items()
    )
    return ToolsInfo(schemas, frozenset(write_tools))


def convert_tau2_file(
    path: Path,
    tools_info: Path | None = None,
    write_tools: list[str] | None = None,
    domain: str | None = None,
) -> tuple[list[ConvertedRun], int]:
    """Every simulation of a results file as a converted run, and the user tool messages left
    out (all are converted before any is recorded)."""
    data = read_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("simulations"), list):
        raise InvalidInputError(f"{path}: expected a tau2-bench results object with 'simulations'")
    info = data.get("info") or {}
    environment = info.get("environment_info") or {}
    domain = domain or environment.get("domain_name")
    if not domain:
        raise InvalidInputError(
            f"{path}: info.environment_info.domain_name: missing (or give --domain)"
        )
    tools = load_tools_info(tools_info, domain) if tools_info else _tool_defs(info, write_tools)
    declared = declared_tools(tools, str(tools_info or path))
    tasks = {str(t.get("id")): t for t in data.get("tasks") or () if isinstance(t, dict)}
    runs, left_out = [], 0
    for index, simulation in enumerate(data["simulations"]):
        where = f"{path}: simulations[{index}]"
        if not isinstance(simulation, dict) or "task_id" not in simulation:
            raise InvalidInputError(f"{where}: expected a simulation with a task_id")
        task = tasks.get(str(simulation["task_id"]))
        check_number(simulation, "trial", where, whole=True, optional=True)
        check_number(
            simulation.get("reward_info") or {}, "reward", f"{where}.reward_info", optional=True
        )
        record, skipped = tau_record(simulation, task, environment.get("policy"), where)
        left_out += skipped
        run = convert_tau_run(record, domain, tools, declared, where)
        labels = {
            **run.header.labels,
            "format": "tau2-bench",
            "termination_reason": str(simulation.get("termination_reason")),
        }
        header = run.header.model_copy(update={"labels": labels})
        runs.append(ConvertedRun(header=header, events=run.events, opaque=run.opaque))
    return runs, left_out


async def import_tau2_bench(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    path: Path,
    tools_info: Path | None = None,
    write_tools: list[str] | None = None,
    domain: str | None = None,
) -> ImportReport:
    """Import every simulation of a tau2-bench results file."""
    runs, left_out = convert_tau2_file(path, tools_info, write_tools, domain)
    report = await record_converted(ledger, artifacts, evidence, runs, ImportReport(str(path)))
    if left_out:
        report.opaque.append(f"{path}: {left_out} user-side tool messages left out")
    return report
