"""``/api/runs``: recorded runs, as the CLI's ``runs list|show|verify --json`` show them, and
one event's payload as ``evidence show --json`` shows it (sanitized; raw for the forensic role,
with a reason, audited under the caller's identity).

Runs are evidence records, returned with their recorded (snake_case) field names.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from api.answers import answers
from api.auth import FORENSIC, READ, Principal, require_role
from api.errors import naming
from api.schemas import RunIdPath
from api.state import State
from app.anchors import anchor_use
from app.privacy import read_evidence
from app.runs import describe_run, list_runs_view
from models.errors import AccessDeniedError, InvalidInputError
from models.privacy import FORENSIC_ROLE

router = APIRouter(prefix="/api/runs", tags=["runs"])
Reader = Annotated[Principal, Depends(require_role(*READ))]
#: an event's sequence number (1-based; bounded so that no database integer overflows)
Sequence = Annotated[int, Path(ge=1, le=2**62, description="The event's sequence number.")]


@router.get("", summary="List recorded runs, newest first")
async def list_runs(
    state: State, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    return {"runs": await list_runs_view(await state.stores(), limit=limit)}


@router.get(
    "/{run_id}",
    summary="A run: header, pinned versions, events and evidence",
    responses=answers(404, 409),
)
async def get_run(run_id: RunIdPath, state: State, _: Reader) -> dict[str, Any]:
    with naming("run_id"):
        return await describe_run(await state.stores(), run_id)


@router.get(
    "/{run_id}/verify",
    summary="Verify the run: chain, payloads, artifacts, lookup rows, anchor (intact, or the "
    "first problem and where)",
    responses=answers(404),
)
async def verify_run(run_id: RunIdPath, state: State, _: Reader) -> dict[str, Any]:
    stores = await state.stores()
    with naming("run_id"):
        result = await stores.ledger.verify(run_id)
    # how the anchors were used (signed, unsigned, none; or no anchor location configured)
    return result.report() | {"anchor_log": anchor_use(stores, result)}


@router.get(
    "/{run_id}/events/{sequence}",
    summary="One event's payload, sanitized (the raw form's hash and state beside it)",
    responses=answers(404, 409, 410),
)
async def get_event(
    run_id: RunIdPath, sequence: Sequence, state: State, _: Reader
) -> dict[str, Any]:
    stores = await state.stores()
    with naming("run_id"):
        return await read_evidence(stores, run_id, sequence)


@router.get(
    "/{run_id}/events/{sequence}/raw",
    summary="One event's raw payload: forensic role and a reason; every attempt is audited",
    responses={
        403: {"description": "the caller lacks the forensic role (the refusal is audited)"},
        410: {"description": "the raw content was destroyed by a deletion request"},
        422: {"description": "no reason was given"},
        **answers(404, 409),
    },
)
async def get_raw_event(
    run_id: RunIdPath,
    sequence: Sequence,
    state: State,
    principal: Reader,
    reason: Annotated[str, Query(description="Why raw evidence is read (audited).")] = "",
) -> dict[str, Any]:
    return await read_raw(await state.stores(), principal, run_id, sequence, reason)


async def read_raw(
    stores: Any, principal: Principal, run_id: str, sequence: int, reason: str
) -> dict[str, Any]:
    """A raw read as ``GET …/raw`` makes it (the web console's too): a reason is required,
    and the privacy service audits every attempt under the caller's identity."""
    if not reason.strip():
        raise InvalidInputError(
            "a raw read needs ?reason=TEXT (every raw read is audited)", field="reason"
        )
    # a reader without the forensic role is refused by the privacy service, which audits the
    # refusal (who tried, on what, why) before answering 403
    role = FORENSIC_ROLE if principal.may(FORENSIC) else "+".join(sorted(principal.roles))
    try:
        with naming("run_id"):
            return await read_evidence(
                stores,
                run_id,
                sequence,
                raw=True,
                actor=principal.identity,
                reason=reason,
                role=role,
            )
    except AccessDeniedError as exc:
        raise exc.with_field("Authorization") from exc
