"""Verification of a run's raw-payload rows (rule 17) against its chain and the audit chain:
each row names a chained event's sanitized hash; a destroyed row names a destruction the
audit chain records for the run (``models.privacy.RawDeletion``: who, when, which request, how
many rows); and an event whose stored (chained) payload holds a pseudonym has its row — its
raw form differed, so it was recorded, and a missing row was deleted. Part of
``stores.sql.run_check``'s full check, read in the same snapshot as the chain."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import inspect, select
from sqlalchemy.ext.asyncio import AsyncConnection

from models.privacy import RawDeletion, RawRowState, raw_row_problems
from models.redaction import NO_REDACTION, has_redaction_token
from stores.sql import schema
from stores.sql.database import utc
from stores.sql.lookup_check import Found
from stores.sql.privacy_audit import chained_deletions


class RawRows(NamedTuple):
    """What the raw check reads of a run besides its events."""

    rows: Sequence[Any]
    deletions: Sequence[tuple[RawDeletion, Any]]
    #: the run keeps raw forms apart: it has raw rows, or its header pins a redaction policy
    redacted_run: bool


async def read_raw_rows(conn: AsyncConnection, run_id: str) -> RawRows:
    """The run's raw-payload rows and chained deletions (none before migration 0003, nor
    after a downgrade: a database opened without migrating is verified on what it has)."""
    if not await conn.run_sync(lambda c: inspect(c).has_table("raw_payloads")):
        return RawRows([], [], False)
    r = schema.raw_payloads.c
    rows = (
        await conn.execute(
            select(
                r.sequence,
                r.raw_hash,
                r.sanitized_hash,
                r.key_id,
                r.ciphertext_ref,
                r.destroyed_at,
                r.destroyed_by_request,
                r.ciphertext.is_not(None).label("inline"),
            ).where(r.run_id == run_id, r.sequence.is_not(None))
        )
    ).all()
    header = (
        await conn.execute(select(schema.runs.c.record).where(schema.runs.c.run_id == run_id))
    ).first()
    pinned = (header.record or {}).get("pinned") or {} if header is not None else {}
    policy = pinned.get("redaction_policy_version") if isinstance(pinned, dict) else None
    # the audit chain is read only for a run with destroyed rows (privacy_audit has no index
    # on run_id; most runs have nothing destroyed)
    destroyed = any(r.destroyed_at is not None or r.destroyed_by_request for r in rows)
    deletions = await chained_deletions(conn, run_id) if destroyed else []
    return RawRows(rows, deletions, bool(rows) or policy not in (None, NO_REDACTION))


def check_raw_rows(
    run_id: str,
    read: RawRows,
    sanitized: Mapping[int, str],
    payloads: Mapping[int, bytes | memoryview],
    found: Found,
) -> None:
    """Add every problem of the run's raw rows to ``found`` (``sanitized``: the chained
    payload hash by sequence; ``payloads``: the payloads read back, by sequence)."""
    if not read.redacted_run:
        return
    states = []
    for row in read.rows:
        found.checked["raw_payloads"] += 1
        if sanitized.get(row.sequence) != row.sanitized_hash:
            found.add(
                row.sequence,
                "raw_payloads",
                f"raw payload of sequence {row.sequence} names sanitized hash "
                f"{row.sanitized_hash}, not the chained event's",
            )
            continue
        states.append(
            RawRowState(
                sequence=row.sequence,
                redacted=row.raw_hash != row.sanitized_hash,
                has_ciphertext=row.key_id is not None and bool(row.inline or row.ciphertext_ref),
                destroyed_at=utc(row.destroyed_at) if row.destroyed_at is not None else None,
                destroyed_by_request=row.destroyed_by_request,
            )
        )
    have = {row.sequence for row in read.rows}
    tokened = [
        sequence
        for sequence, data in payloads.items()
        if sequence not in have and has_redaction_token(data)
    ]
    for sequence, message in raw_row_problems(run_id, states, read.deletions, sorted(tokened)):
        found.add(sequence, "raw_payloads", message)
