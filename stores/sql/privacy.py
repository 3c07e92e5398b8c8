"""The raw-evidence vault in SQL: per-run data keys (wrapped by the KEK), encrypted raw
payloads beside the sanitized ones, and each run's data subjects.

A raw payload is sealed with AES-256-GCM under its run's data key (key scope ``run:<run id>``,
in ``data_keys.subject_id``; keys made before per-run keys are scoped to a subject id), with
associated data binding it to its run, its raw hash and its sanitized hash: a ciphertext
moved to another event, or a swapped raw_hash, fails to authenticate.

Crypto-shredding: deleting a data subject destroys the keys of every run the subject is in
(and any key scoped to the subject) and the ciphertexts, and records the destruction of each
run in the audit chain in the same transaction (``RawDeletion``: who, when, which request).
On SQLite the file is then scrubbed (``PRAGMA secure_delete``, ``VACUUM``, a WAL checkpoint
that truncates the WAL): no destroyed wrapped key nor ciphertext is left in the database
file or its WAL. PostgreSQL keeps only ciphertext and wrapped keys, never an unwrapped key;
dead row versions and its WAL keep the destroyed ones until VACUUM and WAL recycling
(``docs/privacy.md``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, overload

import structlog
from sqlalchemy import and_, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from models.digest import sha256_digest, verify_content
from models.errors import ConfigurationError, ContentDestroyedError, IntegrityError
from models.privacy import RawDeletion, RawEvidence, RawEvidenceState
from models.redaction import DEFAULT_REDACTION_POLICY, has_redaction_token
from runtime.ports import ArtifactStore
from stores.encryption import (
    KeyEncryptionKey,
    data_key_cipher,
    load_kek,
    new_data_key,
    open_sealed,
    seal,
)
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.privacy_audit import append_audit, chained_deletions
from stores.sql.privacy_subjects import CAS_PREFIX, RawVaultQueries

log = structlog.get_logger(__name__)

#: ciphertexts above this size go to the artifact store as encrypted objects
INLINE_CIPHERTEXT_LIMIT = 64 * 1024
#: how long a subject's active data key is sealed with without reading it again: a run seals
#: many payloads under one key; a key crypto-shredded by another process is seen at most this
#: late (by this process: at once)
ACTIVE_KEY_SECONDS = 30.0
NO_SUBJECT = "subject:none"
#: how many runs' active keys a process keeps at most
ACTIVE_KEYS_KEPT = 1024
#: a SQLite WAL checkpoint that truncates the WAL is tried this many times (a reader of an
#: older snapshot keeps its frames until it ends)
SCRUB_ATTEMPTS = 5


def key_scope(run_id: str) -> str:
    """The scope of ``run_id``'s data keys (``data_keys.subject_id``, and the KEK's context)."""
    return f"run:{run_id}"


def _now() -> datetime:
    return datetime.now(UTC)


def associated_data(run_id: str, raw_hash: str, sanitized_hash: str) -> bytes:
    return f"replaybook-raw\x00{run_id}\x00{raw_hash}\x00{sanitized_hash}".encode()


async def insert_missing_raws(conn: AsyncConnection, rows: Sequence[dict[str, Any]]) -> None:
    """Insert the artifacts' ``raw_payloads`` rows not kept already (one read, one insert)."""
    r = schema.raw_payloads.c
    kept = {
        row.raw_id
        for row in (
            await conn.execute(select(r.raw_id).where(r.raw_id.in_([w["raw_id"] for w in rows])))
        ).all()
    }
    missing: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["raw_id"] not in kept:
            missing.setdefault(row["raw_id"], row)
    if missing:
        await conn.execute(insert(schema.raw_payloads), list(missing.values()))


def event_raw_id(run_id: str, sequence: int) -> str:
    return f"event:{run_id}:{sequence}"


def artifact_raw_id(run_id: str, sanitized_hash: str) -> str:
    return f"artifact:{run_id}:{sanitized_hash}"


class SqlRawVault(RawVaultQueries):
    """Seals and opens raw payloads; the KEK is loaded on first use (``kek`` factory)."""

    def __init__(
        self,
        db: Database,
        artifacts: ArtifactStore | None = None,
        kek: KeyEncryptionKey | Callable[[], KeyEncryptionKey] = load_kek,
        *,
        clock: Callable[[], datetime] = _now,
        ingest_redaction: str = DEFAULT_REDACTION_POLICY,
    ) -> None:
        self.db = db
        #: the policy ingestion applies when a run's header pins none
        #: (``REPLAYBOOK_INGEST_REDACTION``; ``none``: off)
        self.ingest_redaction = ingest_redaction
        self.artifacts = artifacts
        self._kek = kek
        self.clock = clock
        #: (subject, KEK id) -> (key id, data key, read at (monotonic)): the active keys sealed
        #: with lately
        self._active: dict[tuple[str, str], tuple[str, bytes, float]] = {}

    @property
    def kek(self) -> KeyEncryptionKey:
        if not isinstance(self._kek, KeyEncryptionKey):
            self._kek = self._kek()
        return self._kek

    # data keys --------------------------------------------------------------------------------

    @overload
    async def _active_key(self, subject_id: str, *, create: Literal[True]) -> tuple[str, bytes]: ...

    @overload
    async def _active_key(
        self, subject_id: str, *, create: Literal[False]
    ) -> tuple[str, bytes] | None: ...

    async def _active_key(self, subject_id: str, *, create: bool) -> tuple[str, bytes] | None:
        cached = self._active.get((subject_id, self.kek.key_id))
        if cached is not None and time.monotonic() - cached[2] < ACTIVE_KEY_SECONDS:
            return cached[0], cached[1]
        found = await self._read_active_key(subject_id, create=create)
        if found is not None:
            if len(self._active) >= ACTIVE_KEYS_KEPT:
                self._active.clear()
            self._active[(subject_id, self.kek.key_id)] = (*found, time.monotonic())
        return found

    async def _read_active_key(self, subject_id: str, *, create: bool) -> tuple[str, bytes] | None:
        k = schema.data_keys.c
        query = (
            select(k.key_id, k.wrapped_key)
            # one active data key per subject and key-encryption key: a process holding another
            # KEK (a rotated one, another deployment's) starts a new key instead of failing
            .where(
                k.subject_id == subject_id,
                k.kek_id == self.kek.key_id,
                k.wrapped_key.is_not(None),
            )
            .order_by(k.created_at, k.key_id)
        )
        async with self.db.read() as conn:
            row = (await conn.execute(query)).first()
        if row is not None:
            return row.key_id, self.kek.unwrap(bytes(row.wrapped_key), subject_id)
        if not create:
            return None
        key, key_id = new_data_key(), f"dk-{uuid.uuid4().hex}"
        async with self.db.transaction() as conn:
            await conn.execute(
                insert(schema.data_keys).values(
                    key_id=key_id,
                    subject_id=subject_id,
                    kek_id=self.kek.key_id,
                    wrapped_key=self.kek.wrap(key, subject_id),
                    created_at=self.clock(),
                )
            )
        # two processes may both have created one: everyone uses the oldest active key
        return await self._read_active_key(subject_id, create=False) or (key_id, key)

    async def _key(self, key_id: str, subject_id: str) -> bytes | None:
        k = schema.data_keys.c
        async with self.db.read() as conn:
            row = (
                await conn.execute(
                    select(k.wrapped_key, k.kek_id, k.subject_id).where(k.key_id == key_id)
                )
            ).first()
        if row is None or row.wrapped_key is None:
            return None
        if row.kek_id != self.kek.key_id:
            raise ConfigurationError(
                f"data key {key_id} of {subject_id!r} is wrapped by key-encryption key "
                f"{row.kek_id}, not by the configured {self.kek.key_id} (REPLAYBOOK_KEK_FILE)"
            )
        # the key's scope is its wrap's context: a run's key, or a subject's (older keys)
        return self.kek.unwrap(bytes(row.wrapped_key), row.subject_id)

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

    # sealing ----------------------------------------------------------------------------------

    async def seal_raw(
        self,
        run_id: str,
        raw: bytes,
        raw_hash: str,
        sanitized_hash: str,
        subject_id: str | None,
    ) -> dict[str, Any]:
        """Encrypt ``raw``; returns the ``raw_payloads`` columns (without id and sequence)."""
        subject = subject_id or NO_SUBJECT
        # one key per run: deleting any subject of the run (a person it only read about too)
        # destroys a key, and retention destroys the run's
        key_id, key = await self._active_key(key_scope(run_id), create=True)
        sealed = seal(data_key_cipher(key), raw, associated_data(run_id, raw_hash, sanitized_hash))
        ref = None
        if len(sealed) > INLINE_CIPHERTEXT_LIMIT and self.artifacts is not None:
            ref = CAS_PREFIX + await self.artifacts.put(sealed)
            sealed_inline: bytes | None = None
        else:
            sealed_inline = sealed
        return {
            "subject_id": subject,
            "key_id": key_id,
            "ciphertext": sealed_inline,
            "ciphertext_ref": ref,
        }

    async def record_artifact_raw(
        self,
        run_id: str,
        raw: bytes,
        sanitized_hash: str,
        policy_version: str,
        subject_id: str | None,
    ) -> None:
        """Keep the encrypted raw form of a sanitized artifact (messages, checkpoint state)."""
        await self.record_artifact_raws(run_id, [(raw, sanitized_hash)], policy_version, subject_id)

    async def record_artifact_raws(
        self,
        run_id: str,
        artifacts: Sequence[tuple[bytes, str]],
        policy_version: str,
        subject_id: str | None,
    ) -> None:
        """``record_artifact_raw`` of several (raw bytes, sanitized hash) pairs, in one
        transaction: one read of those already kept, one insert of the others."""
        rows = await self.artifact_raw_rows(run_id, artifacts, policy_version, subject_id)
        if rows:
            async with self.db.transaction() as conn:
                await insert_missing_raws(conn, rows)

    async def artifact_raw_rows(
        self,
        run_id: str,
        artifacts: Sequence[tuple[bytes, str]],
        policy_version: str,
        subject_id: str | None,
    ) -> list[dict[str, Any]]:
        """The ``raw_payloads`` rows (raw content sealed) of sanitized artifacts given as
        (raw bytes, sanitized hash) pairs, one per artifact."""
        rows: dict[str, dict[str, Any]] = {}
        for raw, sanitized_hash in artifacts:
            raw_id = artifact_raw_id(run_id, sanitized_hash)
            if raw_id in rows:
                continue
            raw_hash = sha256_digest(raw)
            rows[raw_id] = {
                "raw_id": raw_id,
                "run_id": run_id,
                "sequence": None,
                "sanitized_hash": sanitized_hash,
                "raw_hash": raw_hash,
                "redaction_policy_version": policy_version,
                "created_at": self.clock(),
                **await self.seal_raw(run_id, raw, raw_hash, sanitized_hash, subject_id),
            }
        return list(rows.values())

    # reading ----------------------------------------------------------------------------------

    async def raw_evidence(
        self, run_id: str, sequence: int, *, decrypt: bool, for_raw_read: bool = False
    ) -> RawEvidence:
        """What is known of the raw form of event ``run_id#sequence``; with ``decrypt``, its
        content (``ContentDestroyedError`` naming the request when it was destroyed). For a
        raw read (``decrypt`` or ``for_raw_read``), ``IntegrityError`` when the row was
        deleted or its destruction is not the one the audit chain records."""
        strict = decrypt or for_raw_read
        r = schema.raw_payloads.c
        async with self.db.read() as conn:
            row = (
                await conn.execute(
                    select(schema.raw_payloads).where(r.raw_id == event_raw_id(run_id, sequence))
                )
            ).first()
        if row is None:
            if strict:
                await self._refuse_missing_row(run_id, sequence)
            return RawEvidence(
                run_id=run_id, sequence=sequence, state=RawEvidenceState.NOT_RECORDED
            )
        base = {
            "run_id": run_id,
            "sequence": sequence,
            "raw_hash": row.raw_hash,
            "sanitized_hash": row.sanitized_hash,
            "redaction_policy_version": row.redaction_policy_version,
            "subject_id": row.subject_id,
        }
        if row.raw_hash == row.sanitized_hash:
            return RawEvidence(**base, state=RawEvidenceState.SAME_AS_SANITIZED)
        if row.destroyed_at is not None or row.destroyed_by_request is not None:
            if strict:
                await self._refuse_unrecorded_destruction(row)
            return RawEvidence(
                **base,
                state=RawEvidenceState.DESTROYED,
                destroyed_at=utc(row.destroyed_at),
                destroyed_by_request=row.destroyed_by_request,
            )
        evidence = RawEvidence(**base, state=RawEvidenceState.AVAILABLE)
        if not decrypt:
            return evidence
        return evidence.model_copy(update={"content": await self._open(row)})

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

    async def _open(self, row: Any) -> bytes:
        key = await self._key(row.key_id, row.subject_id)
        if key is None:
            raise ContentDestroyedError(
                f"raw content of {row.run_id}#{row.sequence}: the data key of subject "
                f"{row.subject_id} was destroyed"
            )
        if row.ciphertext is not None:
            sealed = bytes(row.ciphertext)
        else:
            assert self.artifacts is not None, "encrypted raw object needs the artifact store"
            sealed = await self.artifacts.get(row.ciphertext_ref[len(CAS_PREFIX) :])
        raw = open_sealed(
            data_key_cipher(key),
            sealed,
            associated_data(row.run_id, row.raw_hash, row.sanitized_hash),
        )
        try:
            return verify_content(raw, row.raw_hash, f"raw payload of {row.run_id}#{row.sequence}")
        except IntegrityError:
            raise

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
    ) -> tuple[int, list[str], int]:
        """In one transaction: the raw payloads of ``run_ids`` (and any sealed under the
        subject), the runs' data keys (and the subject's older ones), and one chained
        ``RawDeletion`` per run touched. Then the SQLite file is scrubbed."""
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
    ) -> tuple[int, list[str]]:
        """Destroy the raw payloads and the data keys of one run (retention)."""
        count, refs, _ = await self._destroy([run_id], None, request_id, at or self.clock(), actor)
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
