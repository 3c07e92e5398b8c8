"""Evidence records written beside their ledger event, into tables they are looked up in.

A record reaches its table in the same transaction as the event that carries it, so the
ledger and the lookup tables never disagree about what was recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from models import (
    ApprovalRecord,
    ContextSnapshot,
    HashedRecord,
    PolicyDecisionRecord,
    PromptArtifact,
    ReplayCheckpoint,
    RetrievalFixture,
    SideEffectRecord,
    ToolFixture,
)
from models.errors import ConflictError
from stores.sql import schema


@dataclass(frozen=True)
class Projection:
    table: Table
    key_column: str
    #: the record's own id when it has one; else the carrying event's id is the key
    natural_key: Callable[[Any], str] | None
    columns: Callable[[Any], dict[str, Any]]
    #: records whose row is updated by later events (side-effect status transitions)
    mutable: bool = False


PROJECTIONS: dict[type[HashedRecord], Projection] = {
    ToolFixture: Projection(
        schema.tool_fixtures,
        "fixture_id",
        None,
        lambda r: {
            "tool_call_id": r.tool_call_id,
            "capability_id": r.capability_id,
            "request_hash": r.request_hash,
            "outcome": str(r.outcome),
        },
    ),
    PromptArtifact: Projection(
        schema.prompt_artifacts,
        "artifact_id",
        lambda r: r.artifact_id,
        lambda r: {"template_version": r.template_version, "compiled_hash": r.compiled_hash},
    ),
    ContextSnapshot: Projection(
        schema.context_snapshots, "snapshot_id", lambda r: r.snapshot_id, lambda r: {}
    ),
    RetrievalFixture: Projection(
        schema.retrieval_fixtures,
        "retrieval_id",
        None,
        lambda r: {"query_hash": r.query_hash, "retriever_version": r.retriever_version},
    ),
    PolicyDecisionRecord: Projection(
        schema.policy_decisions,
        "decision_id",
        None,
        lambda r: {
            "policy_id": r.policy_id,
            "policy_version": r.policy_version,
            "decision": str(r.decision),
        },
    ),
    ApprovalRecord: Projection(
        schema.approvals,
        "approval_id",
        lambda r: r.approval_id,
        lambda r: {"action_hash": r.action_hash},
    ),
    SideEffectRecord: Projection(
        schema.side_effects,
        "side_effect_id",
        lambda r: r.side_effect_id,
        lambda r: {
            "capability_id": r.capability_id,
            "idempotency_key": r.idempotency_key,
            "status": str(r.status),
        },
        mutable=True,
    ),
    ReplayCheckpoint: Projection(
        schema.checkpoints, "checkpoint_id", None, lambda r: {"sequence": r.sequence}
    ),
}


@dataclass(frozen=True)
class ProjectedRecord:
    """A record to project and the event that carries it."""

    record: HashedRecord
    run_id: str
    step_id: str
    event_id: str
    sequence: int
    content_hash: str


async def write_projections(
    conn: AsyncConnection, projected: list[ProjectedRecord], now: datetime
) -> None:
    """Project a batch of records: the first record of each key goes in with one multi-row
    ``INSERT … ON CONFLICT DO NOTHING RETURNING key`` per table; only what that did not insert
    (a key already recorded, a side effect's next status in the same batch) takes the
    one-by-one path of ``write_projection``, in recording order."""
    first: dict[Table, dict[str, tuple[int, dict[str, Any]]]] = {}
    later: list[int] = []
    for index, item in enumerate(projected):
        projection = PROJECTIONS.get(type(item.record))
        if projection is None:
            continue
        row = _row(projection, item, now)
        rows = first.setdefault(projection.table, {})
        key = row[projection.key_column]
        if key in rows:
            later.append(index)
        else:
            rows[key] = (index, row)
    for table, rows in first.items():
        key_column = table.c[_key_column(table)]
        inserted = await conn.execute(
            _insert_if_absent(conn, table, key_column.name).returning(key_column),
            [row for _, row in rows.values()],
        )
        done = set(inserted.scalars().all())
        later.extend(index for key, (index, _) in rows.items() if key not in done)
    for index in sorted(later):
        item = projected[index]
        await write_projection(
            conn,
            item.record,
            run_id=item.run_id,
            step_id=item.step_id,
            event_id=item.event_id,
            sequence=item.sequence,
            content_hash=item.content_hash,
            now=now,
        )


def _key_column(table: Table) -> str:
    return next(p.key_column for p in PROJECTIONS.values() if p.table is table)


#: in a batch writer's row of a mutable record: True when the record changed within the batch
#: (its row is then the batch's last content whatever is stored; see ``plain_insert_rows``)
CHANGED_IN_BATCH = "_changed_in_batch"


def plain_insert_rows(
    projected: list[tuple[ProjectedRecord, str]], now: datetime
) -> dict[Table, list[dict[str, Any]]] | None:
    """The lookup rows of a batch for a batch writer (``stores.sql.batch_writer``), each record
    given with its JSON text (its canonical payload); None when only ``write_projections``
    can write them (one mutable record of two runs in one batch).

    A mutable record (a side effect's status) is one row per key, the one ``write_projections``
    leaves behind after inserting the key's first record and updating it with each later one
    whose content differs from the row's: the batch's last new content, flagged
    ``CHANGED_IN_BATCH`` when the batch changed it (then written whatever is stored; else
    only when the stored content differs, or inserted when there is none)."""
    rows: dict[Table, list[dict[str, Any]]] = {}
    latest: dict[str, dict[str, Any]] = {}
    for item, text in projected:
        projection = PROJECTIONS.get(type(item.record))
        if projection is None:
            continue
        row = _row(projection, item, now, record=text)
        if projection.mutable:
            kept = latest.get(row[projection.key_column])
            if kept is not None:
                if kept["run_id"] != row["run_id"]:
                    return None  # the general path refuses the second run's record
                if kept["content_hash"] != row["content_hash"]:
                    kept.update(row, **{CHANGED_IN_BATCH: True})
                continue
            row[CHANGED_IN_BATCH] = False
            latest[row[projection.key_column]] = row
        rows.setdefault(projection.table, []).append(row)
    return rows


MUTABLE_TABLES: tuple[Table, ...] = tuple(p.table for p in PROJECTIONS.values() if p.mutable)


def mutable_key_column(table: Table) -> str:
    return _key_column(table)


def _row(
    projection: Projection, item: ProjectedRecord, now: datetime, *, record: Any = None
) -> dict[str, Any]:
    """The lookup row of ``item``; ``record``: the record column's value when already at hand
    (else the record as JSON data)."""
    key = projection.natural_key(item.record) if projection.natural_key else item.event_id
    row: dict[str, Any] = {
        projection.key_column: key,
        "run_id": item.run_id,
        "step_id": item.step_id,
        "content_hash": item.content_hash,
        "sequence": item.sequence,
        "record": item.record.model_dump(mode="json") if record is None else record,
        **projection.columns(item.record),
    }
    if "updated_at" in projection.table.c:
        row["updated_at"] = now
    return row


async def write_projection(
    conn: AsyncConnection,
    record: HashedRecord,
    *,
    run_id: str,
    step_id: str,
    event_id: str,
    sequence: int,
    content_hash: str,
    now: datetime,
) -> None:
    """Insert (or, for mutable records, update) the lookup row of ``record``."""
    projection = PROJECTIONS.get(type(record))
    if projection is None:
        return
    table = projection.table
    row = _row(
        projection,
        ProjectedRecord(record, run_id, step_id, event_id, sequence, content_hash),
        now,
    )
    key = row[projection.key_column]
    key_col = table.c[projection.key_column]
    # the usual case is a new key: one INSERT that does nothing on a conflict, then look only
    # when it did nothing (a repeated record, or a side effect's next status)
    inserted = await conn.execute(_insert_if_absent(conn, table, projection.key_column).values(row))
    if inserted.rowcount == 1:
        return
    existing = (
        await conn.execute(select(table.c.run_id, table.c.content_hash).where(key_col == key))
    ).one()
    if existing.run_id != run_id:
        raise ConflictError(f"{table.name} {key!r} is already recorded for run {existing.run_id!r}")
    if existing.content_hash == content_hash:
        return
    if not projection.mutable:
        raise ConflictError(f"{table.name} {key!r} is already recorded with other content")
    await conn.execute(update(table).where(key_col == key).values(row))


def _insert_if_absent(conn: AsyncConnection, table: Table, key_column: str) -> Any:
    if conn.dialect.name == "postgresql":
        return pg_insert(table).on_conflict_do_nothing(index_elements=[key_column])
    return sqlite_insert(table).on_conflict_do_nothing(index_elements=[key_column])
