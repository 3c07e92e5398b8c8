"""Payloads of the ledger's events, prepared before anything is written: canonical bytes and
their hash, inline up to the limit or put into the artifact store (``cas:`` + digest), and the
``raw_payloads`` row of a sanitized event (its raw bytes sealed in the vault when they differ).
Part of ``stores.sql.ledger.SqlLedger``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from models.digest import sha256_digest
from models.errors import InvalidInputError
from runtime.ports import ArtifactStore, NewEvent
from stores.sql.privacy import SqlRawVault

INLINE_PAYLOAD_LIMIT = 64 * 1024
INLINE_REF = "inline"
CAS_PREFIX = "cas:"


class PayloadPreparation:
    """What ``SqlLedger`` prepares an append's payloads with (its attributes, set there)."""

    artifacts: ArtifactStore | None
    inline_limit: int
    vault: SqlRawVault

    async def _prepare_payloads(
        self, run_id: str, events: Sequence[NewEvent]
    ) -> list[tuple[str, str, bytes | None, dict[str, Any] | None]]:
        """Each event's payload reference, hash, inline bytes and raw row; the payloads over
        the inline limit are put into the artifact store side by side (their writes overlap)."""
        stored: list[bytes] = []
        prepared = [await self._prepare_payload(run_id, e, stored) for e in events]
        if stored:
            artifacts = self.artifacts
            assert artifacts is not None  # checked by _prepare_payload
            await asyncio.gather(*(artifacts.put(data) for data in stored))
        return prepared

    async def _prepare_payload(
        self, run_id: str, event: NewEvent, stored: list[bytes]
    ) -> tuple[str, str, bytes | None, dict[str, Any] | None]:
        """``stored``: where a payload over the inline limit is added, for the caller to put."""
        data = event.canonical_payload()
        digest = sha256_digest(data)
        raw_columns = (  # a plain event has no raw row (no coroutine to await for it)
            None
            if event.redaction_policy_version is None
            else await self._prepare_raw(run_id, event, digest)
        )
        if len(data) <= self.inline_limit:
            return INLINE_REF, digest, data, raw_columns
        if self.artifacts is None:
            raise InvalidInputError(
                f"payload of {len(data)} bytes exceeds the inline limit of {self.inline_limit} "
                "and no artifact store is configured"
            )
        stored.append(data)
        return CAS_PREFIX + digest, digest, None, raw_columns

    async def _prepare_raw(
        self, run_id: str, event: NewEvent, sanitized_hash: str
    ) -> dict[str, Any] | None:
        """The ``raw_payloads`` row of a sanitized event: its three hashes/versions always, the
        raw bytes encrypted under the subject's data key when they differ (rule 17). The chain
        covers the sanitized hash only, so destroying the raw content never breaks it."""
        if event.redaction_policy_version is None:
            return None
        raw = event.raw if event.raw is not None else None
        raw_hash = sha256_digest(raw) if raw is not None else sanitized_hash
        columns: dict[str, Any] = {
            "run_id": run_id,
            "sanitized_hash": sanitized_hash,
            "raw_hash": raw_hash,
            "redaction_policy_version": event.redaction_policy_version,
            "subject_id": event.subject_id,
            # every row of a batch has the same columns (one multi-row insert): a row whose
            # raw equals its sanitized view has no ciphertext
            "key_id": None,
            "ciphertext": None,
            "ciphertext_ref": None,
        }
        if raw is not None and raw_hash != sanitized_hash:
            columns |= await self.vault.seal_raw(
                run_id, raw, raw_hash, sanitized_hash, event.subject_id
            )
        return columns
