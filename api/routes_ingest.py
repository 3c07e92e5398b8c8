"""``POST /api/runs`` and ``POST /api/runs/{id}/events``: ingestion of runs recorded outside
Replaybook's runtime, over ``ingest`` (the format is ``models.ingest``; its records keep
their snake_case field names). Idempotent: re-sending what is recorded answers 200 and writes
nothing; something new answers 201; another event under a recorded sequence answers 409."""

from __future__ import annotations

from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, Response

from api.auth import OPERATE, Principal, require_role
from api.errors import naming
from api.state import State
from ingest import ingest_events, ingest_run
from models.errors import NotFoundError
from models.ingest import IngestEventBatch, IngestRunHeader

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/runs", tags=["ingestion"])
Ingester = Annotated[Principal, Depends(require_role(*OPERATE))]


@router.post(
    "",
    status_code=201,
    responses={200: {"description": "The same header again: nothing written"}},
    summary="Create a run from an external agent's header (idempotent)",
)
async def create_run(
    header: IngestRunHeader, state: State, caller: Ingester, response: Response
) -> dict[str, Any]:
    stores = await state.stores()
    with naming("run_id"):
        result = await ingest_run(stores.ledger, stores.artifacts, header)
    if not result.recorded:
        response.status_code = 200
    log.info("run ingested", run_id=header.run_id, caller=caller.caller, new=bool(result.recorded))
    return result.model_dump(mode="json")


@router.post(
    "/{run_id}/events",
    status_code=201,
    responses={200: {"description": "Every event was already recorded: nothing written"}},
    summary="Append a batch of events to an ingested run (atomic, idempotent)",
)
async def append_events(
    run_id: str, batch: IngestEventBatch, state: State, caller: Ingester, response: Response
) -> dict[str, Any]:
    stores = await state.stores()
    with naming("events"):
        try:
            result = await ingest_events(
                stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events
            )
        except NotFoundError as exc:
            raise exc.with_field("run_id") from exc
    if not result.recorded:
        response.status_code = 200
    log.info("events ingested", run_id=run_id, caller=caller.caller, recorded=result.recorded)
    return result.model_dump(mode="json")
