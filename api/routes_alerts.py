"""``POST /api/alerts``: Prometheus Alertmanager webhook notifications open or attach to
incidents (``app.alerts``), each fingerprint into one incident for ever; ``POST /api/watches``:
an incident whose recurrence watch is asked for (what ``incident open --watch-clean-runs``
does)."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, Query
from pydantic import Field

from api.answers import answers
from api.auth import OPERATE, Principal, require_role
from api.schemas import AlertmanagerWebhook, Body, Id, camel
from api.state import State
from app.alerts import take_alerts
from app.incidents import new_incident_request, open_incident

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/alerts", tags=["alerts"])
watches = APIRouter(prefix="/api/watches", tags=["incidents"])
Operator = Annotated[Principal, Depends(require_role(*OPERATE))]


@router.post(
    "",
    summary="Alertmanager webhook: open or attach to incidents",
    responses=answers(404, 409),
)
async def post_alerts(
    body: AlertmanagerWebhook,
    state: State,
    caller: Operator,
    repeat: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> dict[str, Any]:
    """Each firing alert whose labels name a ``run_id`` opens an incident for that run; one
    naming a ``signature`` attaches to the newest incident signed so. A fingerprint taken
    before is a ``duplicate``: counted, nothing opened or attached. Answers what was done
    with each alert."""
    alerts = [a.model_dump(mode="json") for a in body.alerts]
    taken = await take_alerts(state.client, await state.stores(), alerts, repeat=repeat)
    log.info(
        "alerts taken",
        receiver=body.receiver,
        actions=[t["action"] for t in taken],
        caller=caller.caller,
    )
    return camel({"alerts": taken})


class WatchCreate(Body):
    """An incident for ``source_run_id`` that, after its report and the human's confirmation
    (the fix version), watches new runs carrying the fix until ``clean_runs`` are clean or
    ``days`` have passed; a recurrence reopens a linked incident."""

    source_run_id: str = Id()
    clean_runs: int = Field(ge=1, le=100_000)
    days: float = Field(default=14.0, gt=0, le=365)
    repeat: int = Field(default=20, ge=1, le=1000)


@watches.post(
    "",
    status_code=202,
    summary="Open an incident with its recurrence watch",
    responses=answers(404, 409),
)
async def post_watch(body: WatchCreate, state: State, caller: Operator) -> dict[str, Any]:
    request = new_incident_request(
        body.source_run_id,
        [],
        repeat=body.repeat,
        watch_clean_runs=body.clean_runs,
        watch_days=body.days,
    )
    await open_incident(
        state.client,
        await state.stores(),
        request,
        source_field="sourceRunId",
        catalogs=state.catalogs(),
    )
    log.info("watch requested", incident_id=request.incident_id, caller=caller.caller)
    return camel(
        {
            "incident_id": request.incident_id,
            "source_run_id": body.source_run_id,
            "phase": "FREEZING",
            "watch": {"clean_runs": body.clean_runs, "days": body.days},
        }
    )
