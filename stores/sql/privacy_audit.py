"""The audit chain's appends and the destructions of raw content it records: one writer at a
time, inside the caller's transaction (a destruction is chained in the transaction that
destroys), and the chained ``RawDeletion`` records of a run, read back for verification."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from models.anchor import AUDIT_GENESIS, audit_link
from models.privacy import AuditRecord, RawDeletion, raw_deletion
from stores.sql import schema

#: the advisory lock that serialises audit appends on PostgreSQL
_AUDIT_LOCK = 0x52425F4155444954  # "RB_AUDIT"


async def append_audit(conn: AsyncConnection, record: AuditRecord) -> tuple[int, str]:
    """Append ``record`` to the audit chain inside the caller's transaction: linked to the
    record before it, one writer at a time (SQLite's write lock; a transaction-scoped
    advisory lock on PostgreSQL). Returns its position and link hash (to anchor)."""
    a = schema.privacy_audit.c
    body = record.model_dump(mode="json")
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _AUDIT_LOCK})
    last = (
        await conn.execute(
            select(a.position, a.hash)
            .where(a.position.is_not(None))
            .order_by(a.position.desc())
            .limit(1)
        )
    ).first()
    position = 1 if last is None else last.position + 1
    previous = AUDIT_GENESIS if last is None else last.hash
    link = audit_link(previous, position, body)
    await conn.execute(
        insert(schema.privacy_audit).values(
            audit_id=record.audit_id,
            at=record.at,
            run_id=record.run_id,
            record=body,
            position=position,
            previous_hash=previous,
            hash=link,
        )
    )
    return position, link


async def chained_deletions(
    conn: AsyncConnection, run_id: str
) -> list[tuple[RawDeletion, datetime]]:
    """The destructions of ``run_id``'s raw content the audit chain records, each with its
    time; a record whose link hash does not recompute is left out (it proves nothing)."""
    a = schema.privacy_audit.c
    rows = (
        await conn.execute(
            select(a.position, a.previous_hash, a.hash, a.record).where(
                a.run_id == run_id, a.position.is_not(None)
            )
        )
    ).all()
    out = []
    for row in rows:
        body = dict(row.record)
        found = raw_deletion(body)
        if found is not None and audit_link(row.previous_hash, row.position, body) == row.hash:
            out.append(found)
    return out
