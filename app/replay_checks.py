"""What a replay or incident request is checked against before any workflow starts: the ids
it would take, the run it names, and every input the deployment's agents can judge (prompt
bundle, model, policy, retriever, start step, denied approvals). Both faces call these, so
the CLI (exit 2) and the API (409 / 422) refuse the same input with the same words, and a
request that cannot work never becomes a workflow that fails late."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from app.candidates import tool_loop_problem
from models import (
    ApprovalRecord,
    ExecutionEventType,
    FixtureMissPolicy,
    ReplayMode,
    RunRecord,
    SideEffectRecord,
)
from models.errors import ConflictError, InvalidInputError, NotFoundError, RunNotFoundError
from models.ingest import TOOL_LOOP_GRAPH_ID
from models.replay_flow import ReplayPlan
from models.replay_plans import PlanFields
from models.tools_module import ToolsModulePin

if TYPE_CHECKING:
    from runtime.replay.catalog import AgentCatalog
    from stores.bundle import Stores

#: the deployment's agents by graph id (``worker.catalogs.catalogs``), given by the face
Catalogs = Mapping[str, "AgentCatalog"]


async def check_replay_id_free(stores: Stores, replay_id: str, field: str) -> None:
    """``ConflictError`` naming the replay already recorded under ``replay_id`` (a replay's
    run in the ledger has the replay's id): a second one would fail late, or replace it."""
    try:
        run = await stores.ledger.get_run(replay_id)
    except RunNotFoundError:
        return
    raise ConflictError(
        f"{field} {replay_id}: replay {replay_id!r} already exists (recorded "
        f"{run.created_at.isoformat()}, {run.status.value}); choose another id",
        field=field,
    )


async def check_incident_id_free(stores: Stores, incident_id: str, field: str) -> None:
    """``ConflictError`` naming the incident already recorded under ``incident_id``: opening
    it again would start a workflow that replaces it (its report, its confirmation)."""
    try:
        existing = await stores.incidents.get_incident(incident_id)
    except NotFoundError:
        return
    raise ConflictError(
        f"{field} {incident_id}: incident {incident_id!r} already exists (phase "
        f"{existing.phase}, run {existing.source_run_id}); choose another id",
        field=field,
    )


def candidate_problem(catalog: AgentCatalog, kind: str, value: str) -> str | None:
    """Why ``catalog`` cannot replay with the candidate ``kind=value`` (``None``: it can)."""
    if kind == "graph":
        known = catalog.graphs.versions(catalog.graph_id)
        return (
            None
            if value in known
            else f"graph version {value!r} is not known for {catalog.graph_id}"
        )
    check = {
        "prompt": catalog.bundle,
        "model": catalog.model,
        "policy": catalog.policy_set,
        "retriever": catalog.retriever,
    }.get(kind)
    if check is None:
        return None
    try:
        check(value)
    except InvalidInputError as exc:
        return str(exc)
    return None


def check_candidates(
    catalog: AgentCatalog | None, candidates: Sequence[tuple[str, str]], field: str
) -> None:
    """Each ``kind=value`` of an incident's counterfactuals known to the run's agent."""
    for kind, value in candidates if catalog is not None else ():
        if problem := candidate_problem(catalog, kind, value):  # type: ignore[arg-type]
            raise InvalidInputError(f"{field} {kind}={value}: {problem}", field=field)


async def check_replay_plan(
    stores: Stores, plan: ReplayPlan, catalogs: Catalogs | None, fields: PlanFields
) -> None:
    """Every input of ``plan`` the deployment can judge, each refusal naming its field: the
    replay id is free, the overrides are known to the run's agent (``catalogs``: skipped for
    an agent the caller does not know, which the worker judges), the start step is one the
    run recorded, and each denied approval is one the run recorded."""
    from runtime.replay.catalog import replay_model
    from runtime.verification import require_verified

    await check_replay_id_free(stores, plan.replay_id, fields.replay_id)
    run = await stores.ledger.get_run(plan.source_run_id)
    # a tampered source is refused before any workflow starts (the replay's PREPARING checks
    # it again, against what the worker reads)
    await require_verified(stores.ledger, plan.source_run_id, to=f"replay {plan.source_run_id}")
    for field, kind, digest in (
        (fields.system_prompt, "system_prompt", plan.candidate_system_prompt),
        (fields.tools, "tools", plan.candidate_tools),
    ):  # a system prompt or tool catalogue swaps into a tool-loop run only
        if digest and (problem := tool_loop_problem(run.graph_id, kind)):
            raise InvalidInputError(f"{field}: {problem}", field=field)
    catalog = (catalogs or {}).get(run.graph_id)
    if catalog is not None:
        for field, kind, value in (
            (fields.prompt, "prompt", plan.prompt_version),
            (fields.model, "model", plan.model_name),
            (fields.substitute_model, "model", plan.substitute_model),
            (fields.policy, "policy", plan.policy_version),
            (fields.retriever, "retriever", plan.retriever_version),
        ):
            if value and (problem := candidate_problem(catalog, kind, value)):
                raise InvalidInputError(f"{field} {value}: {problem}", field=field)
        if plan.mode is not ReplayMode.RECORDED:
            # the model the replay would call: the recorded one must be configured here
            replay_model(
                catalog, plan.mode, plan.model_name, plan.substitute_model, run.pinned.model_profile
            )
    if plan.tools_module is not None:
        tools = (plan.candidate_tools,) if plan.candidate_tools else ()
        await check_tools_module(stores, run, plan.tools_module, tools, fields.tools_module)
    if plan.from_step is not None:
        await _check_step(stores, plan, fields.from_step)
    if plan.deny_approvals:
        await check_denials(stores, plan.source_run_id, plan.deny_approvals, fields.deny_approvals)


def pin_tools_module(name: str, field: str) -> ToolsModulePin:
    """The team's tools module the user named (a module path or a ``replaybook.tools``
    entry-point name), imported and checked (its contract, at least one READ tool) and pinned
    by the hash of its source files; ``InvalidInputError`` naming ``field`` otherwise."""
    from runtime.team_tools import load_team_tools

    return load_team_tools(name, field).pin


async def check_tools_module(
    stores: Stores,
    run: RunRecord,
    pin: ToolsModulePin,
    candidate_tools: Sequence[str],
    field: str,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
) -> None:
    """Each READ tool of the team's module is a tool of the run's own tool catalogue or of a
    candidate one (``--tools-file``), and READ there: a tool the catalogue says is WRITE is
    never called, and one the model is never offered would never be asked for."""
    from runtime.tool_loop.conversation import LoopInput
    from runtime.tool_loop.graph import load_tools_json

    if miss is not FixtureMissPolicy.SANDBOX_LIVE:
        raise InvalidInputError(
            f"{field} {pin.module}: the team's tools answer fixture misses only under the "
            f"sandbox-live miss policy (here {miss.value})",
            field=field,
        )
    if run.graph_id != TOOL_LOOP_GRAPH_ID:
        raise InvalidInputError(
            f"{field} {pin.module}: a team's tools answer tool-loop runs (ingested or imported "
            f"agents); run {run.run_id} is {run.graph_id}, whose READ tools are its own",
            field=field,
        )
    started = await stores.ledger.events_with_payloads(
        run.run_id, types=frozenset({ExecutionEventType.RUN_STARTED})
    )
    agent_input = json.loads(started[0][1] or b"{}").get("input") if started else None
    loop = LoopInput.from_json(agent_input)
    catalogues = [
        (f"run {run.run_id}'s tool catalogue", await load_tools_json(stores.artifacts, loop))
    ]
    for digest in candidate_tools:
        catalogues.append(
            ("the candidate tool catalogue", json.loads(await stores.artifacts.get(digest)))
        )
    for name in pin.read_tools:
        found = [
            (where, tool.get("side_effect_class") or "WRITE")
            for where, tools in catalogues
            for tool in tools
            if tool.get("name") == name
        ]
        if not found:
            names = sorted({str(t.get("name")) for _, tools in catalogues for t in tools})
            raise InvalidInputError(
                f"{field} {pin.module}: tool {name!r} is not in "
                f"{' nor '.join(where for where, _ in catalogues)} "
                f"(tools: {', '.join(names) or 'none'})",
                field=field,
            )
        for where, effect in found:
            if effect != "READ":
                raise InvalidInputError(
                    f"{field} {pin.module}: tool {name!r} is {effect} in {where}; a replay "
                    "never calls a WRITE tool",
                    field=field,
                )


async def _check_step(stores: Stores, plan: ReplayPlan, field: str) -> None:
    events = await stores.ledger.events(plan.source_run_id)
    steps = list(
        dict.fromkeys(e.step_id for e in events if e.type is ExecutionEventType.STEP_STARTED)
    )
    if plan.from_step not in steps:
        raise InvalidInputError(
            f"{field} {plan.from_step}: run {plan.source_run_id} recorded no such step "
            f"(steps: {', '.join(s for s in steps if s) or 'none'})",
            field=field,
        )


async def check_denials(
    stores: Stores, run_id: str, capabilities: Sequence[str], field: str
) -> None:
    """Deny only a capability whose approval the run recorded: denying an approval that never
    happened would replay nothing different and say nothing."""
    approved = {a.action_hash for a in await stores.evidence.records(ApprovalRecord, run_id)}
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    with_approval = sorted({e.capability_id for e in effects if e.action_hash in approved})
    for capability in capabilities:
        if capability not in with_approval:
            raise InvalidInputError(
                f"{field} {capability}: run {run_id} recorded no approval for it "
                f"(approved: {', '.join(with_approval) or 'none'})",
                field=field,
            )
