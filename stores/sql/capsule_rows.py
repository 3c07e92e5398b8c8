"""A run's rows as plain JSON, out of one database and into another (the incident capsule).

Rows are written column by column as the schema declares them (``DateTime`` as ISO 8601,
``LargeBinary`` as base64, JSON as it is), so the receiving database holds the same values and
the run verifies there exactly as it did at home. Only the evidence of the run itself travels:
no data keys (raw payloads keep only the ciphertext the origin holds), no freeze records, and of
the privacy audit only the run's chained deletions of raw content — what tells a raw row a
deletion request destroyed from one forged (``stores.sql.raw_check``). Brought into another
store, each is appended to that store's audit chain (its body unchanged, its link new), so the
run's destroyed rows verify there as they did at home.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, LargeBinary, Table, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from models.anchor import audit_link
from models.errors import ConflictError, InvalidInputError
from models.privacy import AuditRecord, raw_deletion
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.privacy_audit import append_audit

#: the tables a run's evidence lives in, parents first (the order rows are inserted in)
RUN_TABLES: tuple[Table, ...] = (
    schema.runs,
    schema.execution_events,
    schema.tool_fixtures,
    schema.prompt_artifacts,
    schema.context_snapshots,
    schema.retrieval_fixtures,
    schema.policy_decisions,
    schema.approvals,
    schema.side_effects,
    schema.checkpoints,
    schema.artifacts,
    schema.raw_payloads,
)
_BY_NAME = {t.name: t for t in RUN_TABLES}


def _encode(table: Table, row: Mapping[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column in table.columns:
        value = row[column.name]
        if value is not None and isinstance(column.type, LargeBinary):
            value = base64.b64encode(bytes(value)).decode()
        elif isinstance(value, datetime):
            value = utc(value).isoformat()
        out[column.name] = value
    return out


def _decode(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(row) - set(table.columns.keys())
    if unknown:
        raise InvalidInputError(f"table {table.name} has no column {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    for column in table.columns:
        value = row.get(column.name)
        if value is not None and isinstance(column.type, LargeBinary):
            value = base64.b64decode(value)
        elif value is not None and isinstance(column.type, DateTime):
            value = datetime.fromisoformat(value)
        out[column.name] = value
    return out


async def export_run_rows(db: Database, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of ``run_id`` in the run tables, by table name, as JSON-ready values (events
    in sequence order; other tables by their key), read in one snapshot."""
    async with db.snapshot() as conn:
        return await _run_rows(conn, run_id)


async def export_run_evidence(
    db: Database, run_id: str
) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """``export_run_rows`` and the run's chained deletions of raw content (each audit record
    with its place in the chain: ``audit_id, at, run_id, record, position, previous_hash,
    hash``), read in one snapshot: the rows a deletion destroyed and its record agree."""
    async with db.snapshot() as conn:
        return await _run_rows(conn, run_id), await _chained_deletion_rows(conn, run_id)


async def _run_rows(conn: AsyncConnection, run_id: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table in RUN_TABLES:
        order = list(table.primary_key.columns)
        result = await conn.execute(select(table).where(table.c.run_id == run_id).order_by(*order))
        out[table.name] = [_encode(table, r._mapping) for r in result]
    return out


async def _chained_deletion_rows(conn: AsyncConnection, run_id: str) -> list[dict[str, Any]]:
    """The run's audit records of destroyed raw content whose link recomputes (as
    ``privacy_audit.chained_deletions`` reads them), in chain order."""
    a = schema.privacy_audit
    rows = await conn.execute(
        select(a).where(a.c.run_id == run_id, a.c.position.is_not(None)).order_by(a.c.position)
    )
    out = []
    for row in rows:
        body = dict(row.record)
        if raw_deletion(body) is None:
            continue  # a raw read, not a deletion
        if audit_link(row.previous_hash, row.position, body) != row.hash:
            continue  # proves nothing (the run's verification at home said so)
        out.append(_encode(a, {**row._mapping, "record": body}))
    return out


async def import_run_rows(
    db: Database,
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    deletions: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Insert the rows ``export_run_rows`` gave and append the ``deletions``
    ``export_run_evidence`` gave to this store's audit chain (one transaction); a run already
    in ``db`` is refused with ``ConflictError`` (nothing is overwritten)."""
    unknown = set(rows) - set(_BY_NAME)
    if unknown:
        raise InvalidInputError(f"no run table named {sorted(unknown)[0]!r}")
    run_ids = {r["run_id"] for r in rows.get("runs", ())}
    records = [_deletion_record(d, run_ids) for d in deletions]
    async with db.transaction() as conn:
        for run_id in sorted(run_ids):
            found = await conn.execute(
                select(schema.runs.c.run_id).where(schema.runs.c.run_id == run_id)
            )
            if found.first() is not None:
                raise ConflictError(f"run {run_id} is already in this store")
        for table in RUN_TABLES:
            values = [_decode(table, r) for r in rows.get(table.name, ())]
            if values:
                await conn.execute(insert(table), values)
        a = schema.privacy_audit.c
        for record in records:
            held = await conn.execute(select(a.record).where(a.audit_id == record.audit_id))
            row = held.first()
            if row is None:
                await append_audit(conn, record)
            elif AuditRecord.model_validate(row.record) != record:
                raise ConflictError(
                    f"audit record {record.audit_id} is already in this store, and differs"
                )


def _deletion_record(carried: Mapping[str, Any], run_ids: set[str]) -> AuditRecord:
    """The audit record of a carried deletion of one of ``run_ids``' raw content."""
    body = carried.get("record")
    if not isinstance(body, dict) or raw_deletion(body) is None:
        raise InvalidInputError(f"audit record {carried.get('audit_id')!r} is no raw deletion")
    record = AuditRecord.model_validate(body)
    if record.run_id not in run_ids:
        raise InvalidInputError(
            f"audit record {record.audit_id} destroys raw content of run {record.run_id}, "
            "which is not brought in"
        )
    return record


def _replays_of(source_run_id: str) -> Any:
    """The runs that replayed ``source_run_id`` (their label says so)."""
    runs = schema.runs
    return runs.c.record["labels"]["source_run_id"].as_string() == source_run_id


async def live_read_answers(
    db: Database, source_run_id: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """The answers READ tools gave replays of ``source_run_id`` live (``sandbox-live``), one
    per request hash (the earliest), and the replays they came from: what lets a replay with
    another candidate be answered offline as the incident's own replays were."""
    fixtures, runs = schema.tool_fixtures, schema.runs
    query = (
        select(fixtures.c.run_id, fixtures.c.record)
        .join(runs, runs.c.run_id == fixtures.c.run_id)
        .where(_replays_of(source_run_id), fixtures.c.outcome == "SUCCESS")
        .order_by(runs.c.created_at, fixtures.c.run_id, fixtures.c.sequence)
    )
    answers: dict[str, dict[str, Any]] = {}
    sources: set[str] = set()
    async with db.read() as conn:
        for row in await conn.execute(query):
            record = row.record
            response = record.get("sanitized_response")
            if record.get("side_effect_class") != "READ" or not isinstance(response, dict):
                continue
            if response.get("sandbox_live") is not True or record["request_hash"] in answers:
                continue
            answers[record["request_hash"]] = {
                "capability_id": record["capability_id"],
                "request_hash": record["request_hash"],
                "request": record.get("sanitized_request"),
                "response": {k: v for k, v in response.items() if k != "sandbox_live"},
                "replay_run_id": row.run_id,
            }
            sources.add(row.run_id)
    return list(answers.values()), sorted(sources)


async def newest_gate_replay(db: Database, source_run_id: str) -> dict[str, Any] | None:
    """The newest regression-gate replay (``regress-…``) of ``source_run_id`` by when its first
    event was written (a replay's ``created_at`` is its source's logical time): its run id,
    status, mode and that time; None when the gate never replayed it."""
    runs, events = schema.runs, schema.execution_events
    query = (
        select(runs.c.run_id, runs.c.status, runs.c.record, events.c.recorded_at)
        .join(events, (events.c.run_id == runs.c.run_id) & (events.c.sequence == 1))
        .where(_replays_of(source_run_id), runs.c.run_id.like("regress-%"))
        .order_by(events.c.recorded_at.desc())
        .limit(1)
    )
    async with db.read() as conn:
        row = (await conn.execute(query)).first()
    if row is None:
        return None
    return {
        "replay_id": row.run_id,
        "status": row.status,
        "mode": (row.record.get("labels") or {}).get("mode"),
        "at": utc(row.recorded_at).isoformat(),
    }
