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
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from models.digest import sha256_digest, verify_content
from models.errors import ConfigurationError, ContentDestroyedError, IntegrityError
from models.privacy import NO_SUBJECT, RawEvidence, RawEvidenceState
from models.redaction import DEFAULT_REDACTION_POLICY
from runtime.ports import ArtifactStore, SubjectVault
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
from stores.sql.privacy_shred import RawShredding, key_scope
from stores.sql.privacy_subjects import CAS_PREFIX, RawVaultQueries

log = structlog.get_logger(__name__)

#: ciphertexts above this size go to the artifact store as encrypted objects
INLINE_CIPHERTEXT_LIMIT = 64 * 1024
#: how long a subject's active data key is sealed with without reading it again: a run seals
#: many payloads under one key; a key crypto-shredded by another process is seen at most this
#: late (by this process: at once)
ACTIVE_KEY_SECONDS = 30.0
#: how many runs' active keys a process keeps at most
ACTIVE_KEYS_KEPT = 1024


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


class SqlRawVault(RawVaultQueries, RawShredding, SubjectVault):
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
            # (read in the inserting transaction: one round trip less than a read after it)
            row = (await conn.execute(query)).first()
        if row is None or row.key_id == key_id:
            return key_id, key
        return row.key_id, self.kek.unwrap(bytes(row.wrapped_key), subject_id)

    def new_run_key(self, run_id: str) -> tuple[dict[str, Any], bytes] | None:
        """A data key for ``run_id``, a run being started, made in memory: its ``data_keys``
        row goes into the transaction that creates the run (``adopt_run_key`` once that
        committed), which saves the read that misses and the key's own transaction at its
        first seal. None when this process seals the run's raw content already (a header's
        raw forms made the key). Nothing is sealed with it before it is durable."""
        scope = key_scope(run_id)
        try:
            kek = self.kek
        except ConfigurationError:
            return None  # the first seal fails on it, as without this key
        if (scope, kek.key_id) in self._active:
            return None
        key, key_id = new_data_key(), f"dk-{uuid.uuid4().hex}"
        row = {
            "key_id": key_id,
            "subject_id": scope,
            "kek_id": kek.key_id,
            "wrapped_key": kek.wrap(key, scope),
            "created_at": self.clock(),
        }
        return row, key

    def adopt_run_key(self, row: dict[str, Any], key: bytes) -> None:
        """The key of ``row`` (``new_run_key``) was committed with its run: the run's raw
        content is sealed with it from now on, as with a key read back."""
        if len(self._active) >= ACTIVE_KEYS_KEPT:
            self._active.clear()
        self._active.setdefault(
            (row["subject_id"], row["kek_id"]), (row["key_id"], key, time.monotonic())
        )

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
