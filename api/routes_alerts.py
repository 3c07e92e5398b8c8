"""``POST /api/alerts``: Prometheus Alertmanager webhook notifications open or attach to
incidents (``app.alerts``), idempotently by each alert's fingerprint."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, Query

from api.answers import answers
from api.auth import OPERATE, Principal, require_role
from api.schemas import AlertmanagerWebhook, camel
from api.state import State
from app.alerts import take_alerts

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/alerts", tags=["alerts"])
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
    """Each firing alert whose labels name a ``run_id`` opens (once per fingerprint) an
    incident for that run; one naming a ``signature`` attaches to the newest incident signed
    so. Answers what was done with each alert."""
    alerts = [a.model_dump(mode="json") for a in body.alerts]
    taken = await take_alerts(state.client, await state.stores(), alerts, repeat=repeat)
    log.info(
        "alerts taken",
        receiver=body.receiver,
        actions=[t["action"] for t in taken],
        caller=caller.caller,
    )
    return camel({"alerts": taken})
