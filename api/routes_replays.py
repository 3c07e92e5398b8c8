"""``/api/replays``: start, follow and cancel replays (Temporal ``Replay`` workflows)."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends

from api.answers import answers
from api.auth import OPERATE, READ, Principal, require_role
from api.errors import naming
from api.schemas import CancelAccepted, ReplayAccepted, ReplayCreate, camel
from api.state import State
from app.replay_checks import pin_tools_module
from app.replays import cancel_replay, new_plan, replay_view, start_replay
from models import ReplayMode
from models.replay_plans import PlanFields

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/replays", tags=["replays"])
Reader = Annotated[Principal, Depends(require_role(*READ))]
Operator = Annotated[Principal, Depends(require_role(*OPERATE))]

API_FIELDS = PlanFields(
    mode="mode",
    prompt="candidatePromptVersion",
    model="candidateModel",
    from_step="startFromStep",
    repeat="repeat",
    candidate="candidate",
    max_loop_calls="maxLoopCalls",
    policy="policyVersion",
    retriever="retrieverVersion",
    substitute_model="substituteModel",
    system_prompt="candidateSystemPrompt",
    tools="candidateTools",
    tools_module="toolsModule",
    sandbox_live="fixtureMissPolicy SANDBOX_LIVE",
    deny_approvals="denyApprovals",
    replay_id="replayId",
    mode_names={mode: mode.value for mode in ReplayMode},
)


async def stored_candidates(stores: Any, body: Any) -> dict[str, str]:
    """A body's ``candidateSystemPrompt`` and ``candidateTools`` checked (422 naming the
    field) and stored as artifacts: their digests."""
    import json

    from app.candidates import store_candidates

    tools = body.candidate_tools
    return await store_candidates(
        stores.artifacts,
        system_prompt=body.candidate_system_prompt,
        tools=json.dumps(tools) if tools is not None else None,
        fields=("candidateSystemPrompt", "candidateTools"),
    )


@router.post(
    "",
    status_code=202,
    summary="Start a replay of a recorded run",
    responses=answers(404, 409),
)
async def create_replay(body: ReplayCreate, state: State, caller: Operator) -> ReplayAccepted:
    stores = await state.stores()
    candidates = await stored_candidates(stores, body)
    plan = new_plan(
        body.source_run_id,
        body.mode,
        prompt=body.candidate_prompt_version,
        model=body.candidate_model,
        from_step=body.start_from_step,
        policy=body.policy_version,
        retriever=body.retriever_version,
        deny_approvals=body.deny_approvals,
        repeat=body.repeat,
        budget=body.budget.to_model(),
        miss=body.fixture_miss_policy,
        simulation=body.simulation,
        fields=API_FIELDS,
        substitute_model=body.substitute_model,
        max_loop_calls=body.max_loop_calls,
        candidates=candidates,
        tools_module=pin_tools_module(body.tools_module, "toolsModule")
        if body.tools_module
        else None,
    )
    await start_replay(
        state.client,
        stores,
        plan,
        source_field="sourceRunId",
        catalogs=state.catalogs(),
        fields=API_FIELDS,
    )
    log.info(
        "replay started", replay_id=plan.replay_id, run_id=plan.source_run_id, caller=caller.caller
    )
    return ReplayAccepted(replay_id=plan.replay_id)


@router.get(
    "/{replay_id}",
    summary="A replay's status and, once finished, its comparison",
    responses=answers(404),
)
async def get_replay(replay_id: str, state: State, _: Reader) -> dict[str, Any]:
    with naming("replay_id"):
        return camel(await replay_view(await state.client(), replay_id))


@router.post(
    "/{replay_id}/cancel",
    status_code=202,
    summary="Cancel a replay; it ends CANCELED",
    responses=answers(404, 409),
)
async def cancel(replay_id: str, state: State, caller: Operator) -> CancelAccepted:
    with naming("replay_id"):
        await cancel_replay(await state.client(), replay_id)
    log.info("replay cancel requested", replay_id=replay_id, caller=caller.caller)
    return CancelAccepted(replay_id=replay_id)
