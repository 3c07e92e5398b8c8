"""tau-bench trajectories → ingested tool-loop runs, one per (task_id, trial).

The format (``{task_id, trial, reward, info, traj}`` with OpenAI chat messages in ``traj``) is
converted to ingestion events: the system message is the compiled prompt; each assistant
message a model call; each tool message the result of the assistant's matching tool call
(matched by position: tau-bench reuses ``tool_call_id``); each user message a ``user.reply``
turn; a call to a write tool is a side effect, CONFIRMED with its output as receipt or FAILED
when the output reports an error (tau-bench's failed writes change nothing). The task's
ground truth and the recorded reward are kept as attachments (``load_tau_run`` reads them).

tau-bench does not record the model's identity, times, the environment or a policy engine's
decisions: those are left unrecorded, so completeness names them and confidence is LIMITED.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ingest.import_common import (
    ConvertedRun,
    ImportReport,
    build,
    check_number,
    content_id,
    read_json_file,
    record_converted,
)
from models import ExecutionEventType, SideEffectRecord
from models.errors import InvalidInputError
from models.ingest import IngestEventBatch, IngestRunHeader, IngestTool
from models.model_call import ToolCallRequest
from models.redaction import NO_REDACTION
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader, IngestLedger
from runtime.tool_loop.conversation import parse_arguments

#: tau-bench ends an episode when the agent hands over to a human
TERMINATE_TOOLS = ("transfer_to_human_agents",)
#: tau-bench's default ``max_num_steps`` (model calls of the tool-calling agent)
MAX_STEPS = 30
#: tau-bench records no times: runs are placed at the epoch, visibly "not recorded"
NOT_RECORDED_TIME = datetime(1970, 1, 1, tzinfo=UTC)
UNRECORDED_MODEL = "unrecorded"
ATTACHMENT = "tau_bench"


@dataclass(frozen=True)
class ToolsInfo:
    schemas: tuple[dict[str, Any], ...]
    write_tools: frozenset[str]


def load_tools_info(path: Path, domain: str, tools_commit: str | None = None) -> ToolsInfo:
    """The domain's OpenAI function schemas and write tools from a tools-info file:
    ``{"write_tools": {domain: [...]}, "schemas": {commit: {domain: [...]}}}`` (the newest
    commit listed last is used unless ``tools_commit`` names one), or ``{"schemas": {domain:
    [...]}, "write_tools": {domain: [...]}}``."""
    data = read_json_file(path)
    if not isinstance(data, dict) or "schemas" not in data or "write_tools" not in data:
        raise InvalidInputError(f"{path}: expected an object with 'schemas' and 'write_tools'")
    writes = data["write_tools"].get(domain) if isinstance(data["write_tools"], dict) else None
    if not isinstance(writes, list):
        raise InvalidInputError(f"{path}: write_tools.{domain}: missing (domain {domain!r})")
    schemas = data["schemas"]
    if isinstance(schemas, dict) and domain in schemas:
        chosen = schemas[domain]
    elif isinstance(schemas, dict):
        commits = [c for c, v in schemas.items() if isinstance(v, dict) and domain in v]
        if tools_commit is not None and tools_commit not in commits:
            raise InvalidInputError(
                f"{path}: schemas.{tools_commit}.{domain}: not present (commits: {', '.join(commits)})"
            )
        if not commits:
            raise InvalidInputError(f"{path}: schemas: no schemas for domain {domain!r}")
        chosen = schemas[tools_commit or commits[-1]][domain]
    else:
        raise InvalidInputError(f"{path}: schemas: expected an object")
    if not isinstance(chosen, list):
        raise InvalidInputError(f"{path}: schemas for {domain!r}: expected a list")
    return ToolsInfo(tuple(chosen), frozenset(writes))


def declared_tools(info: ToolsInfo, where: str) -> tuple[IngestTool, ...]:
    tools = []
    for index, schema in enumerate(info.schemas):
        function = schema.get("function", schema) if isinstance(schema, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidInputError(f"{where}: schemas[{index}]: no function name")
        tools.append(
            IngestTool(
                name=function["name"],
                description=function.get("description") or "",
                parameters=function.get("parameters") or {"type": "object"},
                side_effect_class="WRITE" if function["name"] in info.write_tools else "READ",
            )
        )
    return tuple(tools)


def convert_tau_run(
    raw: Any,
    domain: str,
    info: ToolsInfo,
    tools: tuple[IngestTool, ...],
    where: str,
    env_version: str | None = None,
) -> ConvertedRun:
    traj = _checked_traj(raw, where)
    task_id, trial = raw["task_id"], raw["trial"]
    # the tools (schemas, write set) and the database version are part of what was imported:
    # others make another run
    tools_json = [t.model_dump(mode="json") for t in tools]
    parts = (domain, raw, tools_json, *([env_version] if env_version else []))
    run_id = f"tau-{domain}-{task_id}-{trial}-{content_id(*parts)}"
    system = traj[0].get("content") if traj[0]["role"] == "system" else None
    body = traj[1:] if system is not None else traj
    offset = len(traj) - len(body)
    events: list[dict[str, Any]] = []
    opaque: list[str] = []
    pending: list[ToolCallRequest] = []
    model_calls = 0
    for position, message in enumerate(body, start=offset):
        here = f"{where}.traj[{position}]"
        role = message["role"]
        if role == "user":
            last = position == len(traj) - 1
            events.append({"type": "user_message", "content": message.get("content"), "done": last})
        elif role == "assistant":
            calls = _assistant_calls(message, position, here)
            pending = list(calls)
            model_calls += 1
            events.append(
                {
                    "type": "model_call",
                    "model": UNRECORDED_MODEL,
                    "content": message.get("content"),
                    "tool_calls": [c.model_dump(mode="json") for c in calls],
                }
            )
        elif role == "tool":
            if not pending:
                raise InvalidInputError(f"{here}: a tool result with no tool call before it")
            events.append(_tool_event(message, pending.pop(0), here, info.write_tools))
        else:
            opaque.append(f"{here}: role {role!r}")
            events.append(
                {
                    "type": "opaque",
                    "source": "tau-bench",
                    "reason": f"unknown role {role!r}",
                    "data": message,
                }
            )
    reward = raw.get("reward")
    events.append({"type": "run_end", "outcome": {"reward": reward}})
    for n, event in enumerate(events, start=1):
        event["sequence"] = n
    max_model_calls = (
        model_calls
        if _ends_at_limit(traj[-1], events) and model_calls
        else max(MAX_STEPS, model_calls)
    )
    header = _run_header(
        raw, domain, tools, tools_json, run_id, system, max_model_calls, where, env_version
    )
    batch = build(where, IngestEventBatch, {"events": events})
    return ConvertedRun(header=header, events=batch.events, opaque=tuple(opaque))


def _checked_traj(raw: Any, where: str) -> list[dict[str, Any]]:
    """The run's non-empty list of messages, each with a role; refuses anything else."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: expected a run object")
    for key in ("task_id", "trial", "traj"):
        if key not in raw:
            raise InvalidInputError(f"{where}: missing {key!r}")
    check_number(raw, "trial", where, whole=True)
    check_number(raw, "reward", where, optional=True)
    traj = raw["traj"]
    if not isinstance(traj, list) or not traj:
        raise InvalidInputError(f"{where}.traj: expected a non-empty list of messages")
    for index, message in enumerate(traj):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise InvalidInputError(f"{where}.traj[{index}]: expected a message with a role")
    return traj


def _assistant_calls(message: dict[str, Any], position: int, here: str) -> list[ToolCallRequest]:
    """The tool calls an assistant message makes (ids made up from the position if absent)."""
    calls = []
    for k, call in enumerate(message.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidInputError(f"{here}.tool_calls[{k}]: no function name")
        calls.append(
            ToolCallRequest(
                id=str(call.get("id") or f"call-{position}-{k}"),
                name=function["name"],
                arguments=parse_arguments(function.get("arguments")),
            )
        )
    return calls


def _tool_event(
    message: dict[str, Any], call: ToolCallRequest, here: str, write_tools: frozenset[str]
) -> dict[str, Any]:
    """The tool call a tool message answers: its output, ERROR when the output reports one,
    and for a write tool the side effect (FAILED or CONFIRMED)."""
    if message.get("name") not in (None, call.name):
        raise InvalidInputError(
            f"{here}: tool result of {message.get('name')!r} answers a call of {call.name!r}"
        )
    output = message.get("content")
    failed = isinstance(output, str) and output.startswith("Error")
    return {
        "type": "tool_call",
        "tool_call_id": message.get("tool_call_id") or call.id,
        "name": call.name,
        "arguments": call.arguments,
        "output": output,
        "outcome": "ERROR" if failed else "SUCCESS",
        **(
            {"side_effect_status": "FAILED" if failed else "CONFIRMED"}
            if call.name in write_tools
            else {}
        ),
    }


def _ends_at_limit(last: dict[str, Any], events: list[dict[str, Any]]) -> bool:
    """Whether the episode stopped at the step limit rather than by handing over: it ends on a
    tool result that is no hand-over, or on an assistant message calling no tool."""
    return (
        last["role"] == "tool"
        and not any(
            e.get("name") in TERMINATE_TOOLS for e in events[-3:] if e["type"] == "tool_call"
        )
    ) or (last["role"] == "assistant" and not last.get("tool_calls"))


def _run_header(
    raw: dict[str, Any],
    domain: str,
    tools: tuple[IngestTool, ...],
    tools_json: list[dict[str, Any]],
    run_id: str,
    system: str | None,
    max_model_calls: int,
    where: str,
    env_version: str | None = None,
) -> IngestRunHeader:
    """The run's header: labels, prompt, tools, limits, and the task's ground truth, the
    recorded reward and the database version as the ``tau_bench`` attachment."""
    task_id, trial, reward = raw["task_id"], raw["trial"], raw.get("reward")
    task = (raw.get("info") or {}).get("task") or {}
    version_label = {"env_version": env_version} if env_version else {}
    return build(
        where,
        IngestRunHeader,
        {
            "run_id": run_id,
            "started_at": NOT_RECORDED_TIME,
            "labels": {
                "source": "tau-bench",
                "domain": domain,
                "task_id": str(task_id),
                "trial": str(trial),
                "source_reward": str(reward),
                **version_label,
            },
            "system_prompt": system,
            "tools": tools_json,
            "user_turns": True,
            "max_model_calls": max_model_calls,
            # a public benchmark's synthetic users, kept as published: its forensics compare
            # the recorded calls and messages with the task's ground truth as given
            "pinned": {"redaction_policy_version": NO_REDACTION},
            "terminate_tools": [t for t in TERMINATE_TOOLS if any(x.name == t for x in tools)],
            "attachments": {
                ATTACHMENT: {
                    "domain": domain,
                    "task_id": task_id,
                    "trial": trial,
                    "reward": reward,
                    "expected": {
                        "actions": task.get("actions") or [],
                        "outputs": task.get("outputs") or [],
                        "instruction": task.get("instruction"),
                        "user_id": task.get("user_id"),
                    },
                    "reward_info": (raw.get("info") or {}).get("reward_info"),
                    "env_version": env_version,
                    "source_record": raw,
                }
            },
        },
    )


def convert_tau_file(
    path: Path,
    domain: str,
    tools_info: Path,
    tools_commit: str | None = None,
    env_version: str | None = None,
) -> list[ConvertedRun]:
    """``env_version``: the benchmark commit whose databases the runs were recorded against
    (default: ``tools_commit``); kept with each run for the world replay."""
    info = load_tools_info(tools_info, domain, tools_commit)
    env_version = env_version or tools_commit
    tools = declared_tools(info, str(tools_info))
    data = read_json_file(path)
    if not isinstance(data, list):
        raise InvalidInputError(f"{path}: expected a JSON list of runs")
    runs = [
        convert_tau_run(raw, domain, info, tools, f"{path}: runs[{i}]", env_version)
        for i, raw in enumerate(data)
    ]
    seen: dict[str, int] = {}
    for index, run in enumerate(runs):
        labels = run.header.labels
        key = f"{labels['task_id']}/{labels['trial']}"
        if key in seen and runs[seen[key]].header.run_id != run.header.run_id:
            raise InvalidInputError(
                f"{path}: runs[{index}]: task {labels['task_id']} trial {labels['trial']} "
                f"appears twice with different content (first at runs[{seen[key]}])"
            )
        seen[key] = index
    return runs


async def import_tau_bench(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    path: Path,
    domain: str,
    tools_info: Path,
    tools_commit: str | None = None,
    env_version: str | None = None,
) -> ImportReport:
    """Import every run of a tau-bench file (all are converted and checked before any is
    recorded, so a malformed file records nothing)."""
    runs = convert_tau_file(path, domain, tools_info, tools_commit, env_version)
    return await record_converted(ledger, artifacts, evidence, runs, ImportReport(str(path)))


# reading an imported run back ---------------------------------------------------------------


@dataclass(frozen=True)
class TauWriteCall:
    """A call of a write tool: where it is in ``messages`` and what became of it."""

    assistant_index: int
    tool_index: int
    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    output: Any
    #: CONFIRMED, or FAILED when the output reported an error (nothing changed)
    status: str
    side_effect_id: str


class RunLister(EventLedger, Protocol):
    async def list_runs(self, *, limit: int = ...) -> list[Any]: ...


@dataclass(frozen=True)
class ImportedTauRun:
    run_id: str
    domain: str
    task_id: Any
    trial: Any
    #: the source's messages (OpenAI chat format), index-aligned with its ``traj``
    messages: list[dict[str, Any]]
    write_calls: list[TauWriteCall]
    expected_actions: list[dict[str, Any]]
    expected_outputs: list[str]
    instruction: str | None
    user_id: str | None
    reward: Any
    reward_info: Any
    #: the tools offered to the agent, as imported (name, parameters schema, side_effect_class)
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: the benchmark commit whose databases the run was recorded against (None: not given)
    env_version: str | None = None


async def load_tau_run(
    ledger: EventLedger, artifacts: ArtifactStore, evidence: EvidenceReader, run_id: str
) -> ImportedTauRun:
    """An imported tau-bench run as the forensics needs it (``InvalidInputError`` when the run
    was not imported from tau-bench)."""
    run = await ledger.get_run(run_id)
    started = await ledger.events_with_payloads(
        run_id, types=frozenset({ExecutionEventType.RUN_STARTED})
    )
    loop_input = json.loads(started[0][1] or b"{}").get("input") if started else None
    refs = (loop_input or {}).get("attachments") or {}
    if run.labels.get("source") != "tau-bench" or ATTACHMENT not in refs:
        raise InvalidInputError(f"run {run_id!r} was not imported from tau-bench")
    doc = json.loads(await artifacts.get(refs[ATTACHMENT]))
    tools_ref = (loop_input or {}).get("tools_ref")
    messages = doc["source_record"]["traj"]
    effects: list[SideEffectRecord] = await evidence.records(SideEffectRecord, run_id)
    write_names = {e.capability_id for e in effects}
    writes = []
    effect_iter = iter(effects)
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        tool_index = index
        for call in message.get("tool_calls") or ():
            tool_index += 1
            name = call["function"]["name"]
            if name in write_names:
                # side effects are recorded in the order of the calls
                effect = next((e for e in effect_iter if e.capability_id == name), None)
                if effect is None:
                    continue
                answer = messages[tool_index] if tool_index < len(messages) else {}
                writes.append(
                    TauWriteCall(
                        assistant_index=index,
                        tool_index=tool_index,
                        tool_call_id=str(answer.get("tool_call_id") or call.get("id")),
                        name=name,
                        arguments=parse_arguments(call["function"].get("arguments")),
                        output=answer.get("content"),
                        status=effect.status.value,
                        side_effect_id=effect.side_effect_id,
                    )
                )
    expected = doc.get("expected") or {}
    return ImportedTauRun(
        run_id=run_id,
        domain=doc["domain"],
        task_id=doc["task_id"],
        trial=doc["trial"],
        messages=messages,
        write_calls=writes,
        expected_actions=expected.get("actions") or [],
        expected_outputs=expected.get("outputs") or [],
        instruction=expected.get("instruction"),
        user_id=expected.get("user_id"),
        reward=doc.get("reward"),
        reward_info=doc.get("reward_info"),
        tools=json.loads(await artifacts.get(tools_ref)) if tools_ref else [],
        env_version=doc.get("env_version"),
    )


async def list_tau_runs(ledger: RunLister, *, limit: int = 100_000) -> list[str]:
    """The ids of every run imported from tau-bench (their ids start with ``tau-``; the run
    header's ``source`` label confirms it)."""
    ids = []
    for summary in await ledger.list_runs(limit=limit):
        if not summary.run_id.startswith("tau-"):
            continue
        run = await ledger.get_run(summary.run_id)
        if run.labels.get("source") == "tau-bench":
            ids.append(summary.run_id)
    return sorted(ids)
