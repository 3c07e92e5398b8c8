"""``/api/runs``: recorded runs, as the CLI's ``runs list|show|verify --json`` show them.

Runs are evidence records, returned with their recorded (snake_case) field names.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query

from worker.api.auth import READ, Principal, require_role
from worker.api.errors import naming
from worker.api.state import State
from worker.run_views import describe_run, list_runs_view

router = APIRouter(prefix="/api/runs", tags=["runs"])
Reader = Annotated[Principal, Depends(require_role(*READ))]


@router.get("", summary="List recorded runs, newest first")
async def list_runs(
    state: State, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    return {"runs": await list_runs_view(await state.stores(), limit=limit)}


@router.get("/{run_id}", summary="A run: header, pinned versions, events and evidence")
async def get_run(run_id: str, state: State, _: Reader) -> dict[str, Any]:
    with naming("run_id"):
        return await describe_run(await state.stores(), run_id)


@router.get(
    "/{run_id}/verify",
    summary="Verify the run's hash chain (intact, or the first broken sequence and why)",
)
async def verify_run(run_id: str, state: State, _: Reader) -> dict[str, Any]:
    with naming("run_id"):
        result = await (await state.stores()).ledger.verify(run_id)
    return result.model_dump(mode="json")
