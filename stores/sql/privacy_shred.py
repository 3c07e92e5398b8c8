"""Crypto-shredding in the raw-evidence vault: destroying a run's raw payloads and data keys,
the deletion record chained with them in one transaction, the SQLite scrub after it, and the
refusal of a raw read whose row was deleted or whose destruction is not the recorded one.
Mixed into ``stores.sql.privacy.SqlRawVault`` (see its docstring)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import and_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from models.errors import IntegrityError
from models.privacy import RawDeletion
from models.redaction import has_redaction_token
from runtime.ports import ArtifactStore
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.privacy_audit import append_audit, chained_deletions
from stores.sql.privacy_subjects import CAS_PREFIX

log = structlog.get_logger(__name__)

#: a SQLite WAL checkpoint that truncates the WAL is tried this many times (a reader of an
#: older snapshot keeps its frames until it ends)
SCRUB_ATTEMPTS = 5


def key_scope(run_id: str) -> str:
    """The scope of ``run_id``'s data keys (``data_keys.subject_id``, and the KEK's context)."""
    return f"run:{run_id}"


class RawShredding:
    """What ``SqlRawVault`` destroys with (its attributes, set there)."""

    db: Database
    artifacts: ArtifactStore | None
    clock: Callable[[], datetime]
    _active: dict[tuple[str, str], tuple[str, bytes, float]]

    def _forget_active(self, scopes: Sequence[str]) -> None:
        gone = set(scopes)
        self._active = {key: v for key, v in self._active.items() if key[0] not in gone}

    async def destroy_keys(
        self,
        conn: AsyncConnection,
        scopes: Sequence[str],
        request_id: str,
        at: datetime | None = None,
    ) -> int:
        """Crypto-shred every data key of ``scopes`` (run scopes, ``key_scope``, or a subject
        id for keys made before per-run keys) inside the caller's transaction."""
        k = schema.data_keys.c
        self._forget_active(scopes)
        result = await conn.execute(
            update(schema.data_keys)
            .where(k.subject_id.in_(list(scopes)), k.wrapped_key.is_not(None))
            .values(
                wrapped_key=None, destroyed_at=at or self.clock(), destroyed_by_request=request_id
            )
        )
        return result.rowcount or 0

    async def _refuse_missing_row(self, run_id: str, sequence: int) -> None:
        """``IntegrityError`` when the event's stored payload holds pseudonyms: its raw form
        differed, so its raw row was recorded and has been deleted; the sanitized payload is
        not the raw one and is never shown as such."""
        e = schema.execution_events.c
        async with self.db.read() as conn:
            event = (
                await conn.execute(
                    select(e.payload, e.payload_ref).where(
                        e.run_id == run_id, e.sequence == sequence
                    )
                )
            ).first()
        if event is None:
            return
        data: bytes | None = bytes(event.payload) if event.payload is not None else None
        if data is None and event.payload_ref.startswith(CAS_PREFIX) and self.artifacts:
            data = await self.artifacts.get(event.payload_ref[len(CAS_PREFIX) :])
        if data is not None and has_redaction_token(data):
            raise IntegrityError(
                f"raw payload of {run_id}#{sequence} is missing although its sanitized view "
                f"holds pseudonyms: its raw-payload row was deleted (runs verify {run_id})"
            )

    async def _refuse_unrecorded_destruction(self, row: Any) -> None:
        """``IntegrityError`` unless the audit chain records the destruction the row claims
        (its request, its run, its time): a forged deletion is not "legitimately destroyed"."""
        async with self.db.read() as conn:
            deletions = await chained_deletions(conn, row.run_id)
        at = utc(row.destroyed_at) if row.destroyed_at is not None else None
        if not any(
            d.request_id == row.destroyed_by_request and when == at for d, when in deletions
        ):
            raise IntegrityError(
                f"raw payload of {row.run_id}#{row.sequence} says it was destroyed by request "
                f"{row.destroyed_by_request}, but the audit chain records no such deletion of "
                f"run {row.run_id} (forged deletion; runs verify {row.run_id})"
            )

    async def destroy_raw(
        self,
        conn: AsyncConnection,
        run_ids: Sequence[str],
        subject_id: str,
        request_id: str,
        at: datetime | None = None,
    ) -> tuple[dict[str, tuple[int, int]], list[str]]:
        """Mark every raw payload of ``run_ids`` (and any sealed under ``subject_id``) destroyed
        and drop its ciphertext; returns, by run, (event payloads, all payloads) destroyed,
        and the encrypted objects to delete."""
        r = schema.raw_payloads.c
        where = and_(
            r.destroyed_at.is_(None),
            r.raw_hash != r.sanitized_hash,
            (r.run_id.in_(list(run_ids)) | (r.subject_id == subject_id)),
        )
        rows = (
            await conn.execute(select(r.run_id, r.sequence, r.ciphertext_ref).where(where))
        ).all()
        refs = [row.ciphertext_ref[len(CAS_PREFIX) :] for row in rows if row.ciphertext_ref]
        counts: dict[str, tuple[int, int]] = {}
        for row in rows:
            events, every = counts.get(row.run_id, (0, 0))
            counts[row.run_id] = (events + (row.sequence is not None), every + 1)
        if rows:
            await conn.execute(
                update(schema.raw_payloads)
                .where(where)
                .values(
                    ciphertext=None,
                    destroyed_at=at or self.clock(),
                    destroyed_by_request=request_id,
                )
            )
        return counts, refs

    async def _destroy(
        self,
        run_ids: Sequence[str],
        subject_id: str | None,
        request_id: str,
        at: datetime,
        actor: str,
        scrub: bool = True,
    ) -> tuple[int, list[str], int]:
        """In one transaction: the raw payloads of ``run_ids`` (and any sealed under the
        subject), the runs' data keys (and the subject's older ones), and one chained
        ``RawDeletion`` per run touched. Then (``scrub``) the SQLite file is scrubbed."""
        async with self.db.transaction() as conn:
            counts, refs = await self.destroy_raw(
                conn, run_ids, subject_id or "subject:retention-only", request_id, at
            )
            keys_total = 0
            for run_id in sorted(set(run_ids) | set(counts)):
                keys = await self.destroy_keys(conn, [key_scope(run_id)], request_id, at)
                keys_total += keys
                events, every = counts.get(run_id, (0, 0))
                if not (events or every or keys):
                    continue
                deletion = RawDeletion(
                    request_id=request_id,
                    run_id=run_id,
                    subject_id=subject_id,
                    event_payloads=events,
                    raw_payloads=every,
                    data_keys=keys,
                )
                await append_audit(
                    conn, deletion.audit(f"audit-{uuid.uuid4().hex[:16]}", actor, at)
                )
            if subject_id is not None:  # keys scoped to the subject (before per-run keys)
                keys_total += await self.destroy_keys(conn, [subject_id], request_id, at)
        # again: a seal may have read a key meanwhile
        self._forget_active([key_scope(r) for r in set(run_ids) | set(counts)])
        if scrub:
            await self.scrub()
        return sum(every for _, every in counts.values()), refs, keys_total

    async def shred_subject(
        self,
        run_ids: Sequence[str],
        subject_id: str,
        request_id: str,
        at: datetime | None = None,
        *,
        actor: str = "",
    ) -> tuple[int, list[str], int]:
        """Destroy the raw payloads and data keys of ``run_ids`` (and any sealed under the
        subject), all at ``at`` (the receipt's time, so that "destroyed by request R at T"
        names the receipt's T), each run's destruction chained in the audit log under
        ``actor``. Returns (payloads, objects to delete, keys)."""
        return await self._destroy(run_ids, subject_id, request_id, at or self.clock(), actor)

    async def destroy_run_raw(
        self,
        run_id: str,
        request_id: str,
        at: datetime | None = None,
        *,
        actor: str = "retention",
        scrub: bool = True,
    ) -> tuple[int, list[str]]:
        """Destroy the raw payloads and the data keys of one run (retention); ``scrub``: the
        SQLite scrub after it (a sweep of many runs scrubs once, at its end)."""
        count, refs, _ = await self._destroy(
            [run_id], None, request_id, at or self.clock(), actor, scrub
        )
        return count, refs

    async def scrub(self) -> bool:
        """SQLite: rewrite the database file without the destroyed rows' old bytes (freed
        pages and cells are not overwritten by an UPDATE) and empty the WAL, whose frames
        still hold them. True when the WAL was truncated (a reader of an older snapshot in
        another process can keep it for a while: then False, and the next scrub does it).
        PostgreSQL: nothing to do here (False)."""
        if self.db.is_postgresql:
            return False
        async with self.db._writer(), self.db.engine.connect() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            for statement in ("PRAGMA secure_delete=ON", "VACUUM"):
                await (await driver.execute(statement)).close()
            for _ in range(SCRUB_ATTEMPTS):
                cursor = await driver.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                row = await cursor.fetchone()
                await cursor.close()
                if row is not None and row[0] == 0:
                    return True
        log.warning("the WAL could not be truncated after a destruction (a reader holds it)")
        return False
