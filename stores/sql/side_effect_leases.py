"""The side-effect lease (rule 5): a side effect EXECUTING longer than its lease was dispatched
by a process that died before it could record the outcome; the write may have happened, so
it becomes UNKNOWN (and goes to reconciliation), never EXECUTING for good.

The sweep appends the UNKNOWN transition to the side effect's own run, under an event id
derived from the EXECUTING event it ends: two sweepers racing record it once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import select

from models import ExecutionEventType, SideEffectRecord, SideEffectStatus
from models.errors import SequenceConflictError
from runtime.ports import NewEvent
from runtime.unknown_outcomes import count_unknown_recorded
from stores.sql import schema
from stores.sql.ledger import SqlLedger

log = structlog.get_logger(__name__)

#: the evidence an expired lease leaves in the UNKNOWN record
LEASE_EXPIRED = "outcome unknown: lease expired after {seconds:g} s with no outcome recorded"


async def expired_side_effects(
    ledger: SqlLedger, lease_seconds: float, now: datetime, run_id: str | None = None
) -> list[tuple[SideEffectRecord, int]]:
    """The side effects (of ``run_id``, or all) EXECUTING since before ``now - lease``, with
    the sequence of their EXECUTING event."""
    t = schema.side_effects.c
    query = select(t.record, t.sequence).where(
        t.status == SideEffectStatus.EXECUTING.value,
        t.updated_at < now - timedelta(seconds=lease_seconds),
    )
    if run_id is not None:
        query = query.where(t.run_id == run_id)
    async with ledger.db.read() as conn:
        rows = (await conn.execute(query.order_by(t.run_id, t.sequence))).all()
    return [(SideEffectRecord.model_validate(row.record), row.sequence) for row in rows]


async def sweep_expired_side_effects(
    ledger: SqlLedger,
    lease_seconds: float,
    now: datetime | None = None,
    *,
    run_id: str | None = None,
) -> list[SideEffectRecord]:
    """Mark every side effect (of ``run_id``, or all) whose lease expired UNKNOWN; returns the
    records now UNKNOWN."""
    now = now or ledger.clock()
    swept: list[SideEffectRecord] = []
    for record, sequence in await expired_side_effects(ledger, lease_seconds, now, run_id):
        unknown = record.model_copy(
            update={
                "status": SideEffectStatus.UNKNOWN,
                "provider_receipt": LEASE_EXPIRED.format(seconds=lease_seconds),
            }
        )
        event = NewEvent(
            record.step_id,
            ExecutionEventType.SIDE_EFFECT,
            now,
            record=unknown,
            event_id=f"{record.side_effect_id}:lease-expired:{sequence}",
        )
        try:
            await ledger.append(record.run_id, event)
        except SequenceConflictError:  # another sweeper (or the owner) recorded it first
            continue
        count_unknown_recorded([event])
        log.warning(
            "side effect lease expired: UNKNOWN",
            side_effect_id=record.side_effect_id,
            run_id=record.run_id,
            capability=record.capability_id,
        )
        swept.append(unknown)
    return swept
