"""``/api/side-effects``: the durable retry of a write proved not applied (forensic role)."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends

from api.answers import answers
from api.auth import FORENSIC, Principal, require_role
from api.errors import naming
from api.schemas import camel
from api.state import State
from app.side_effects import retry_durably

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/side-effects", tags=["side effects"])
Forensic = Annotated[Principal, Depends(require_role(*FORENSIC))]


@router.post(
    "/{side_effect_id}/retry",
    summary="Retry a write proved not applied (the SideEffectRetry workflow)",
    responses=answers(404, 409, 502),
)
async def post_retry(side_effect_id: str, state: State, caller: Forensic) -> dict[str, Any]:
    """Start (or join) the ``SideEffectRetry`` workflow for the side effect and answer its
    result: 409 when it is UNKNOWN (reconcile first) or not proved not applied, 404 when it
    does not exist, 409 too when its run does not verify."""
    with naming("side_effect_id"):
        result = await retry_durably(state.client, await state.stores(), side_effect_id)
    log.info("side effect retried", side_effect_id=side_effect_id, caller=caller.caller)
    return camel(result)
