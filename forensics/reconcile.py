"""Reconciling side effects whose outcome is UNKNOWN (rule 5).

A ``SideEffectReconciler`` asks the provider, read-only, whether an UNKNOWN write was applied
(payments by ``provider_request_id``, emails by their message lookup). A conclusive answer is
appended to the run's chain as a SIDE_EFFECT event with status RECONCILED and
``reconciled_applied``; the ledger updates the record's projection in the same transaction, so
the evidence and the lookup table never disagree. Only an effect reconciled NOT applied may
then be retried, with its original idempotency key (``runtime.side_effects.retry_side_effect``).

An inconclusive answer, or a capability no reconciler supports, leaves the record UNKNOWN and
the result says a human is needed. ``resolve_by_human`` records a human's decision the same
way; the record's ``provider_receipt`` then says who decided and on what evidence.

Both are safe to repeat (a Temporal activity may be retried): a record already RECONCILED with
the same answer is returned unchanged; a contradicting answer is refused (``ConflictError``).

The ``recorder`` appends to a run recorded earlier: build it with
``runtime.privacy.appending.appending_recorder`` (the run's pinned redaction policy). The
RECONCILED copy is the record's sanitized view plus a new receipt — a reconciler's evidence or
a person's verdict, which may name someone — so in a redacted run it is sanitized in the chain
and its raw form sealed under the run's key (not recorded as "raw = itself", which would chain
the receipt in clear). A recorder with no redaction would also leave the copy without a
raw-payload row, and the pseudonyms it carries (an ingested write's idempotency key) would read
as a deleted raw row: ``runs verify`` would fail on an untouched run.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

from pydantic import Field

from models import ExecutionEventType, Record, SideEffectRecord, SideEffectStatus
from models.errors import ConflictError, InvalidInputError
from runtime.ports import EvidenceReader
from runtime.recorder import RunRecorder
from runtime.verification import require_verified

__all__ = [
    "Reconciliation",
    "ReconciliationOutcome",
    "ReconciliationResult",
    "SideEffectReconciler",
    "reconcile_side_effect",
    "resolve_by_human",
]


class ReconciliationOutcome(StrEnum):
    APPLIED = "APPLIED"
    NOT_APPLIED = "NOT_APPLIED"
    #: the provider could not say (no request id to ask by, an answer that does not match)
    INCONCLUSIVE = "INCONCLUSIVE"


class ReconciliationResult(Record):
    """A reconciler's answer: the outcome, what it saw, and the provider's receipt if any."""

    outcome: ReconciliationOutcome
    evidence: str = Field(min_length=1)
    provider_receipt: str | None = None


@runtime_checkable
class SideEffectReconciler(Protocol):
    """Asks a provider what happened to one write. Read-only: it never sends the write again.

    May raise on a transient failure (the caller, ultimately Temporal, retries); an answer
    that cannot settle the question is ``INCONCLUSIVE``, not an error. An optional ``name``
    attribute is recorded in the receipt (default: the class name).
    """

    def supports(self, capability_id: str) -> bool: ...

    async def reconcile(self, record: SideEffectRecord) -> ReconciliationResult: ...


class Reconciliation(Record):
    """What ``reconcile_side_effect`` did: the record as it now stands, and whether a human
    must decide (``resolve_by_human``) because no reconciler could."""

    record: SideEffectRecord
    needs_human: bool
    #: the reconciler that answered; None when none supports the capability
    reconciler: str | None = None
    result: ReconciliationResult | None = None
    reason: str


def _name(reconciler: SideEffectReconciler) -> str:
    return str(getattr(reconciler, "name", type(reconciler).__name__))


def _applied_text(applied: bool | None) -> str:
    return "applied" if applied else "not applied"


async def _load(
    evidence: EvidenceReader, recorder: RunRecorder, side_effect_id: str
) -> SideEffectRecord:
    record: SideEffectRecord = await evidence.record(SideEffectRecord, side_effect_id)
    if record.run_id != recorder.run_id:
        # the RECONCILED event belongs in the chain of the run that made the write
        raise InvalidInputError(
            f"side effect {side_effect_id} belongs to run {record.run_id}, "
            f"not to the recorder's run {recorder.run_id}"
        )
    return record


def _settled(record: SideEffectRecord, applied: bool | None = None) -> bool:
    """True when ``record`` is already RECONCILED (with ``applied``, when given); raises when
    it is in any state reconciliation does not apply to, or contradicts ``applied``."""
    if record.status is SideEffectStatus.RECONCILED:
        if applied is None or record.reconciled_applied is applied:
            return True
        raise ConflictError(
            f"side effect {record.side_effect_id} is already RECONCILED "
            f"{_applied_text(record.reconciled_applied)}; refusing to record "
            f"{_applied_text(applied)}"
        )
    if record.status is not SideEffectStatus.UNKNOWN:
        raise ConflictError(
            f"side effect {record.side_effect_id} is {record.status.value}: only an UNKNOWN "
            "side effect is reconciled"
        )
    return False


async def _record_reconciled(
    evidence: EvidenceReader,
    recorder: RunRecorder,
    side_effect_id: str,
    applied: bool,
    receipt: str,
) -> SideEffectRecord:
    # read again: another reconciliation may have concluded while the provider was asked
    current = await _load(evidence, recorder, side_effect_id)
    if _settled(current, applied):
        return current
    updated = current.model_copy(
        update={
            "status": SideEffectStatus.RECONCILED,
            "reconciled_applied": applied,
            "provider_receipt": receipt,
        }
    )
    await recorder.record(ExecutionEventType.SIDE_EFFECT, record=updated, step_id=current.step_id)
    if recorder.deferred:
        await recorder.flush()  # a reconciliation is durable before anyone acts on it
    return updated


async def reconcile_side_effect(
    evidence: EvidenceReader,
    recorder: RunRecorder,
    reconcilers: Sequence[SideEffectReconciler],
    side_effect_id: str,
) -> Reconciliation:
    """Ask the first reconciler that supports the capability what happened to an UNKNOWN
    write and record a conclusive answer as RECONCILED (``recorder`` appends to the write's
    run under its pinned redaction policy: see the module docstring).
    A run that does not verify is refused before any provider is asked."""
    await require_verified(
        recorder.ledger, recorder.run_id, to=f"reconcile side effect {side_effect_id}"
    )
    record = await _load(evidence, recorder, side_effect_id)
    if _settled(record):
        return Reconciliation(
            record=record,
            needs_human=False,
            reason=f"already reconciled: {_applied_text(record.reconciled_applied)}",
        )
    reconciler = next((r for r in reconcilers if r.supports(record.capability_id)), None)
    if reconciler is None:
        return Reconciliation(
            record=record,
            needs_human=True,
            reason=f"no reconciler supports {record.capability_id}: a human must decide",
        )
    name = _name(reconciler)
    result = await reconciler.reconcile(record)
    if result.outcome is ReconciliationOutcome.INCONCLUSIVE:
        return Reconciliation(
            record=record,
            needs_human=True,
            reconciler=name,
            result=result,
            reason=f"{name} was inconclusive: {result.evidence}",
        )
    applied = result.outcome is ReconciliationOutcome.APPLIED
    receipt = f"reconciled by {name}: {_applied_text(applied)}"
    if result.provider_receipt:
        receipt += f"; receipt {result.provider_receipt}"
    updated = await _record_reconciled(
        evidence, recorder, side_effect_id, applied, f"{receipt}; {result.evidence}"
    )
    return Reconciliation(
        record=updated,
        needs_human=False,
        reconciler=name,
        result=result,
        reason=f"{name}: {_applied_text(applied)}",
    )


async def resolve_by_human(
    evidence: EvidenceReader,
    recorder: RunRecorder,
    side_effect_id: str,
    *,
    applied: bool,
    evidence_text: str,
    resolved_by: str,
) -> SideEffectRecord:
    """Record a human's decision on an UNKNOWN write as RECONCILED; ``provider_receipt`` says
    who decided and on what evidence. Empty evidence or name is refused."""
    if not evidence_text.strip():
        raise InvalidInputError("resolving a side effect needs the evidence it is based on")
    if not resolved_by.strip():
        raise InvalidInputError("resolving a side effect needs the name of who decided")
    await require_verified(
        recorder.ledger, recorder.run_id, to=f"resolve side effect {side_effect_id}"
    )
    record = await _load(evidence, recorder, side_effect_id)
    if _settled(record, applied):
        return record
    receipt = (
        f"resolved by {resolved_by.strip()}: {_applied_text(applied)}; {evidence_text.strip()}"
    )
    return await _record_reconciled(evidence, recorder, side_effect_id, applied, receipt)
