"""``/api/incidents``: open an incident, follow it, settle what it waits for, read its report."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import structlog
from fastapi import APIRouter, Depends, Query
from fastapi.responses import Response

from api.answers import answers
from api.auth import FORENSIC, OPERATE, READ, Principal, require_role
from api.errors import naming
from api.routes_replays import stored_candidates
from api.schemas import (
    IncidentAccepted,
    IncidentCreate,
    ResolutionBody,
    RootCauseBody,
    RootCauseConfirmed,
    camel,
)
from api.state import State
from app.alerts import incident_alerts
from app.incidents import (
    confirm_root_cause,
    incident_status_view,
    load_report,
    new_incident_request,
    open_incident,
    resolve_side_effect,
)
from app.replay_checks import pin_tools_module
from models.errors import ConflictError
from models.incident_flow import SideEffectResolution

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/incidents", tags=["incidents"])
Reader = Annotated[Principal, Depends(require_role(*READ))]
Operator = Annotated[Principal, Depends(require_role(*OPERATE))]
Forensic = Annotated[Principal, Depends(require_role(*FORENSIC))]

MEDIA = {
    "json": "application/json",
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
}

#: the incident workflow's refusals (worker: workflows/incident.py validators) → the field
REFUSAL_FIELDS = (
    ("must cite", "replayIds"),
    ("not replays of this incident", "replayIds"),
    ("root_cause must not be empty", "rootCause"),
    ("fix_version must not be empty", "fixVersion"),
    ("verified_by must not be empty", "verifiedBy"),
    ("is not waiting for a human", "side_effect_id"),
    ("needs the evidence", "evidence"),
    ("an expectation is needed", "expectations"),
    ("expectation '", "expectations"),
)


def _refusal_field(exc: ConflictError) -> str:
    text = str(exc)
    return next((field for needle, field in REFUSAL_FIELDS if needle in text), "incident_id")


@router.post(
    "",
    status_code=202,
    summary="Open an incident for a recorded run",
    responses=answers(404, 409),
)
async def create_incident(body: IncidentCreate, state: State, caller: Operator) -> IncidentAccepted:
    stores = await state.stores()
    swaps = list((await stored_candidates(stores, body)).items())
    request = new_incident_request(
        body.source_run_id,
        [(c.kind, c.value) for c in body.counterfactuals] + swaps,
        repeat=body.repeat,
        miss_policy=body.fixture_miss_policy,
        retention_days=body.retention_days,
        budget=body.budget.to_model(),
        retry_not_applied=body.retry_not_applied,
        fork_points=body.fork_points,
        fork_first=body.fork_first,
        fork_names=("forkFirst", "forkPoints"),
        substitute_model=body.substitute_model or None,
        tools_module=pin_tools_module(body.tools_module, "toolsModule")
        if body.tools_module
        else None,
    )
    await open_incident(
        state.client,
        stores,
        request,
        source_field="sourceRunId",
        catalogs=state.catalogs(),
        substitute_field="substituteModel",
        tools_module_field="toolsModule",
    )
    log.info("incident opened", incident_id=request.incident_id, caller=caller.caller)
    return IncidentAccepted(incident_id=request.incident_id, source_run_id=body.source_run_id)


@router.get(
    "/{incident_id}",
    summary="Phase, signature, replays with rates, pending human tasks",
    responses=answers(404),
)
async def get_incident(incident_id: str, state: State, _: Reader) -> dict[str, Any]:
    with naming("incident_id"):
        view = await incident_status_view(await state.client(), incident_id)
    # the alerts taken into it (opened it or attached to it), with their deliveries
    view["alerts"] = await incident_alerts(await state.stores(), incident_id)
    return camel(view)


@router.post(
    "/{incident_id}/root-cause",
    summary="Confirm the root cause (a human's decision)",
    responses=answers(404, 409),
)
async def post_root_cause(
    incident_id: str, body: RootCauseBody, state: State, caller: Forensic
) -> RootCauseConfirmed:
    try:
        with naming("incident_id"):
            confirmation = await confirm_root_cause(
                await state.client(),
                incident_id,
                root_cause=body.root_cause,
                fix_version=body.fix_version,
                verified_by=body.verified_by,
                replay_ids=body.replay_ids,
                failure_type=body.failure_type.value if body.failure_type else None,
                expectations=body.expectations,
            )
    except ConflictError as exc:
        raise exc.with_field(_refusal_field(exc)) from exc
    log.info("root cause confirmed", incident_id=incident_id, caller=caller.caller)
    return RootCauseConfirmed(
        incident_id=incident_id,
        verified_by=confirmation.verified_by,
        replay_ids=list(confirmation.replay_ids),
        failure_type=confirmation.failure_type,
        expectations=list(confirmation.expectations),
    )


@router.post(
    "/{incident_id}/side-effects/{side_effect_id}/resolution",
    summary="Settle an UNKNOWN side effect no reconciler could (a human's decision)",
    responses=answers(404, 409),
)
async def post_resolution(
    incident_id: str, side_effect_id: str, body: ResolutionBody, state: State, caller: Forensic
) -> dict[str, Any]:
    resolution = SideEffectResolution(
        side_effect_id=side_effect_id,
        outcome=body.outcome,
        evidence=body.evidence,
        resolved_by=body.resolved_by,
    )
    try:
        with naming("incident_id"):
            result = await resolve_side_effect(await state.client(), incident_id, resolution)
    except ConflictError as exc:
        raise exc.with_field(_refusal_field(exc)) from exc
    log.info(
        "side effect resolved",
        incident_id=incident_id,
        side_effect_id=side_effect_id,
        caller=caller.caller,
    )
    data = result.model_dump(mode="json") if hasattr(result, "model_dump") else result
    return camel(data if isinstance(data, dict) else {"result": str(data)})


@router.get(
    "/{incident_id}/report",
    summary="The FailureForensicsReport as JSON, Markdown or one HTML page",
    response_class=Response,
    responses={
        200: {"content": {m.split(";")[0]: {} for m in MEDIA.values()}},
        **answers(404, 409),
    },
)
async def get_report(
    incident_id: str,
    state: State,
    _: Reader,
    format: Annotated[Literal["json", "md", "html"], Query()] = "json",
) -> Response:
    with naming("incident_id"):
        data = await load_report(await state.stores(), incident_id, format)
    return Response(content=data, media_type=MEDIA[format])
