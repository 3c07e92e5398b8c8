"""Privacy operations over the stores: raw reads with audit, legal holds, the retention sweep
and deletion propagation (crypto-shredding).

Who may read raw: the API checks the ``forensic`` role; the CLI needs the key-encryption key
(without it nothing decrypts). Either way the caller states a reason and every attempt —
read, refused, or content destroyed — is written to the audit trail before anything returns.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from models.enums import RetentionClass
from models.errors import (
    AccessDeniedError,
    ConflictError,
    ContentDestroyedError,
    EvidenceLockedError,
    InvalidInputError,
    NotFoundError,
)
from models.governance import merged_reasons
from models.privacy import (
    FORENSIC_ROLE,
    AuditRecord,
    DeletionReceipt,
    LegalHold,
    RawEvidence,
    RawEvidenceState,
    RawReadOutcome,
)
from models.retention import retention_until
from runtime.evidence_refs import referenced_artifacts
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader

log = structlog.get_logger(__name__)

#: incident phases after which its evidence freeze may be released
FINISHED_PHASES = ("COMPLETED", "FAILED")


@dataclass
class PrivacyService:
    """``vault`` is a ``stores.sql.privacy.SqlRawVault``, ``records`` a
    ``stores.sql.privacy_records.SqlPrivacyRecords`` (injected by the worker)."""

    ledger: EventLedger
    evidence: EvidenceReader
    artifacts: ArtifactStore
    vault: Any
    records: Any

    # raw reads ----------------------------------------------------------------------------

    async def read_raw_evidence(
        self,
        run_id: str,
        sequence: int,
        *,
        actor: str,
        reason: str,
        role: str = FORENSIC_ROLE,
        now: datetime | None = None,
    ) -> RawEvidence:
        """The raw payload of ``run_id#sequence`` (``content`` is its JSON), audited."""
        at = now or self.vault.clock()
        await self.ledger.get_run(run_id)
        base = {"actor": actor or "unknown", "role": role, "run_id": run_id, "sequence": sequence}
        if role != FORENSIC_ROLE or not reason.strip():
            why = (
                "the forensic role is required" if role != FORENSIC_ROLE else "a reason is required"
            )
            await self._audit(base, reason or "-", at, RawReadOutcome.DENIED, why)
            raise AccessDeniedError(f"raw read of {run_id}#{sequence} refused: {why}")
        evidence = await self.vault.raw_evidence(run_id, sequence, decrypt=False, for_raw_read=True)
        if evidence.state is RawEvidenceState.DESTROYED:
            await self._audit(
                base, reason, at, RawReadOutcome.DESTROYED, evidence.destroyed_message()
            )
            raise ContentDestroyedError(evidence.destroyed_message())
        if evidence.state is RawEvidenceState.AVAILABLE:
            try:
                opened = await self.vault.raw_evidence(run_id, sequence, decrypt=True)
            except ContentDestroyedError as exc:
                await self._audit(base, reason, at, RawReadOutcome.DESTROYED, str(exc))
                raise
            await self._audit(base, reason, at, RawReadOutcome.READ, evidence.raw_hash)
            return opened.model_copy(update={"content": json.loads(opened.content)})
        # nothing was redacted (or raw was not kept apart): the stored payload is the raw one
        events = await self.ledger.events(run_id, from_sequence=sequence)
        if not events or events[0].sequence != sequence:
            raise InvalidInputError(f"run {run_id} has no event at sequence {sequence}")
        data = await self.ledger.payload(events[0])
        await self._audit(base, reason, at, RawReadOutcome.NOT_REDACTED, str(evidence.state))
        return evidence.model_copy(update={"content": json.loads(data)})

    async def _audit(
        self,
        base: dict[str, Any],
        reason: str,
        at: datetime,
        outcome: RawReadOutcome,
        detail: str | None,
    ) -> None:
        record = AuditRecord(
            audit_id=f"audit-{uuid.uuid4().hex[:16]}",
            reason=reason,
            at=at,
            outcome=outcome,
            detail=detail,
            **base,
        )
        await self.records.audit(record)
        log.info("raw evidence access", **record.model_dump(mode="json"))

    # legal holds --------------------------------------------------------------------------

    async def hold_reasons(self, run_id: str, now: datetime | None = None) -> list[str]:
        """Why ``run_id``'s evidence is on hold (legal holds and incident freezes); [] if not."""
        at = now or self.vault.clock()
        reasons = [
            f"legal hold {h.hold_id} ({h.reason})"
            for h in await self.records.holds(run_id)
            if h.active(at)
        ]
        reasons += [
            f"incident {i} froze its evidence" for i in await self.records.active_freezes(run_id)
        ]
        # the chained holds and freezes: a row deleted or released in SQL lifts nothing
        return merged_reasons(reasons, await self.records.governance_reasons(run_id, at))

    async def hold(
        self,
        run_id: str,
        reason: str,
        *,
        until: datetime | None = None,
        by: str = "cli",
        now: datetime | None = None,
    ) -> tuple[LegalHold, int]:
        """Place a legal hold; the run's artifacts and encrypted raw objects get the store's
        legal hold too (S3 Object Lock). Returns the hold and the number of objects held."""
        at = now or self.vault.clock()
        if not reason.strip():
            raise InvalidInputError("a legal hold needs a reason")
        await self.ledger.get_run(run_id)
        hold = LegalHold(
            hold_id=f"hold-{uuid.uuid4().hex[:16]}",
            run_id=run_id,
            reason=reason,
            placed_by=by,
            placed_at=at,
            until=until,
        )
        await self.records.place_hold(hold)
        digests = await self._objects(run_id)
        for digest in digests:
            await self.artifacts.set_legal_hold(digest, True)
        return hold, len(digests)

    async def release(
        self, run_id: str, now: datetime | None = None, *, by: str = "cli", reason: str = ""
    ) -> list[LegalHold]:
        """Release the run's legal holds (chained: ``by``, ``reason``); store holds stay while
        an incident freeze holds it."""
        at = now or self.vault.clock()
        await self.ledger.get_run(run_id)
        released = await self.records.release_holds(run_id, at, by=by, reason=reason)
        if not await self.hold_reasons(run_id, at):
            for digest in await self._objects(run_id):
                await self.artifacts.set_legal_hold(digest, False)
        return released

    async def release_freeze(
        self,
        run_id: str,
        incident_id: str,
        now: datetime | None = None,
        *,
        by: str = "cli",
        reason: str = "",
    ) -> list[str]:
        """Release the evidence freeze an incident put on ``run_id`` — a deliberate act (e.g.
        before carrying out a deletion request), allowed only once the incident is COMPLETED
        or FAILED: a running incident still needs its evidence. Returns the released freeze
        ids; the store's legal holds are lifted by ``release`` when nothing else holds."""
        at = now or self.vault.clock()
        await self.ledger.get_run(run_id)
        phase = await self.records.incident_phase(incident_id)
        if phase is None:
            raise NotFoundError(f"incident {incident_id!r} is not recorded")
        if phase not in FINISHED_PHASES:
            raise ConflictError(
                f"incident {incident_id} is {phase}: its freeze can be released once it is "
                "COMPLETED or FAILED"
            )
        released = await self.records.release_freezes(run_id, incident_id, at, by=by, reason=reason)
        if not released and incident_id not in await self.records.freezing_incidents(run_id):
            raise InvalidInputError(f"incident {incident_id} froze no evidence of run {run_id}")
        log.info("incident freeze released", run_id=run_id, incident_id=incident_id)
        return released

    async def _objects(self, run_id: str) -> list[str]:
        present = await referenced_artifacts(self.ledger, self.evidence, run_id, self.artifacts)
        return sorted(present | set(await self.vault.raw_refs(run_id)))

    # deletion -----------------------------------------------------------------------------

    async def delete_subject(
        self, subject_id: str, request_id: str, now: datetime | None = None, *, by: str = ""
    ) -> DeletionReceipt:
        """Crypto-shred ``subject_id``: destroy its data keys and the raw content of every run
        about it, delete the encrypted raw objects, record a receipt. Refused, destroying
        nothing, while any of those runs is on hold. The same request again returns its
        receipt."""
        at = now or self.vault.clock()
        if not subject_id.strip() or not request_id.strip():
            raise InvalidInputError("delete-subject needs a subject id and a request id")
        existing = await self.records.receipt(request_id)
        if existing is not None:
            if existing.subject_id != subject_id:
                raise InvalidInputError(
                    f"deletion request {request_id} was for subject {existing.subject_id}"
                )
            return existing
        run_ids = await self.vault.runs_of_subject(subject_id)
        held = {run: await self.hold_reasons(run, at) for run in run_ids}
        held = {run: reasons for run, reasons in held.items() if reasons}
        if held:
            names = "; ".join(f"run {run}: {', '.join(r)}" for run, r in sorted(held.items()))
            raise EvidenceLockedError(
                f"subject {subject_id} is under legal hold, nothing was deleted ({names})"
            )
        count, refs, keys = await self.vault.shred_subject(
            run_ids, subject_id, request_id, at, actor=by or "unknown"
        )
        await self.records.anchor_audit_head()  # the chained deletions
        deleted = 0
        for digest in refs:
            if await self.artifacts.exists(digest):
                await self.artifacts.delete(digest)
                deleted += 1
        incidents, cases = await self.vault.related_records(run_ids)
        receipt = DeletionReceipt(
            request_id=request_id,
            subject_id=subject_id,
            executed_at=at,
            runs=tuple(run_ids),
            raw_payloads_destroyed=count,
            raw_objects_deleted=deleted,
            data_keys_destroyed=keys,
            incidents=tuple(incidents),
            regression_cases=tuple(cases),
            detail={
                "kept": "sanitized views, hashes and the hash chain (verification stays intact); "
                "incidents, regression cases and reports hold sanitized views only"
            },
        )
        await self.records.put_receipt(receipt)
        log.info("subject deleted", **receipt.model_dump(mode="json"))
        return receipt

    # retention ----------------------------------------------------------------------------

    async def sweep(self, now: datetime | None = None) -> dict[str, Any]:
        """Destroy the raw content of every run past its retention class, unless on hold."""
        at = now or self.vault.clock()
        destroyed, skipped = [], []
        for run_id, retention_class, created_at in await self.vault.expired_runs(at):
            if retention_until(created_at, RetentionClass(retention_class)) > at:
                continue
            reasons = await self.hold_reasons(run_id, at)
            if reasons:
                skipped.append({"run_id": run_id, "held": reasons})
                continue
            count, refs = await self.vault.destroy_run_raw(
                run_id, f"retention:{retention_class}:{at.date().isoformat()}", at, scrub=False
            )
            await self.records.anchor_audit_head()
            for digest in refs:
                if await self.artifacts.exists(digest):
                    await self.artifacts.delete(digest)
            destroyed.append({"run_id": run_id, "raw_payloads": count, "class": retention_class})
        if destroyed:  # the destroyed bytes out of the SQLite file and its WAL, once
            await self.vault.scrub()
        return {"swept_at": at.isoformat(), "destroyed": destroyed, "held": skipped}
