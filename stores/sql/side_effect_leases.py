"""The side-effect lease (rule 5): a side effect EXECUTING longer than its lease was dispatched
by a process that died before it could record the outcome; the write may have happened, so
it becomes UNKNOWN (and goes to reconciliation), never EXECUTING for good.

The sweep appends the UNKNOWN transition to the side effect's own run, under an event id
derived from the EXECUTING event it ends: two sweepers racing record it once.

In a run that keeps raw forms apart (rule 17), the UNKNOWN is a copy of the EXECUTING record's
sanitized view — the sweeper never holds (nor decrypts) the raw form — so it is recorded with
a raw-payload row saying its raw form is itself, under the EXECUTING event's redaction policy.
Without that row the pseudonyms the copy carries would read as a raw row somebody deleted
(``stores.sql.raw_check``): an untouched run would fail ``runs verify``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlalchemy import select

from models import ExecutionEventType, SideEffectRecord, SideEffectStatus
from models.errors import SequenceConflictError
from models.redaction import NO_REDACTION
from runtime.ports import NewEvent
from runtime.unknown_outcomes import count_unknown_recorded
from stores.sql import schema
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import event_raw_id

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
        policy = await _redaction_policy(ledger, record.run_id, sequence)
        if policy is not None:  # made of sanitized evidence: its raw form is itself
            event = NewEvent(
                event.step_id,
                event.type,
                now,
                record=unknown,
                event_id=event.event_id,
                raw=event.canonical_payload(),
                redaction_policy_version=policy,
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


async def _redaction_policy(ledger: SqlLedger, run_id: str, sequence: int) -> str | None:
    """The redaction policy the EXECUTING event at ``sequence`` was recorded under (its raw
    row's), else the one the run's header pins; None when the run keeps no raw forms."""
    r, runs = schema.raw_payloads.c, schema.runs.c
    async with ledger.db.read() as conn:
        row = (
            await conn.execute(
                select(r.redaction_policy_version).where(r.raw_id == event_raw_id(run_id, sequence))
            )
        ).first()
        if row is not None:
            return str(row.redaction_policy_version)
        header = (await conn.execute(select(runs.record).where(runs.run_id == run_id))).first()
    pinned = ((header.record or {}).get("pinned") or {}) if header is not None else {}
    policy = pinned.get("redaction_policy_version") if isinstance(pinned, dict) else None
    return None if policy in (None, NO_REDACTION) else str(policy)
