"""The side-effect ledger (rule 5): every WRITE is PLANNED durably before the provider hears
of it, then EXECUTING, then CONFIRMED, FAILED, or UNKNOWN when its outcome cannot be known.

An UNKNOWN effect is never retried: ``retry`` raises ``ReconciliationRequiredError`` before
anything reaches the provider. Only an effect proved not applied (FAILED, or RECONCILED with
``reconciled_applied=False``) is retried, with its original idempotency key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from models import ExecutionEventType, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash
from models.digest import digest_hex
from models.errors import (
    ProviderRejectedError,
    ReconciliationRequiredError,
    RetryNotAllowedError,
)
from runtime.ports import EvidenceReader
from runtime.recorder import RunRecorder

#: the provider call: (idempotency_key, provider_request_id) -> receipt (JSON). An adapter
#: may declare which of its errors are definitive refusals (raised before anything was
#: dispatched) as a ``definitive_errors`` tuple attribute; ``ProviderRejectedError`` always is.
ProviderCall = Callable[[str, str], Awaitable[dict[str, Any]]]


def definitive_errors(call: ProviderCall) -> tuple[type[BaseException], ...]:
    """The errors of ``call`` that prove the write was not applied."""
    declared: tuple[type[BaseException], ...] = getattr(call, "definitive_errors", ())
    return (ProviderRejectedError, *declared)


def unknown_evidence(exc: BaseException) -> str:
    """What an UNKNOWN side effect keeps of the error that made its outcome unknowable."""
    message = str(exc) or "(no message)"
    return f"outcome unknown: {type(exc).__name__}: {message}"


def idempotency_key(run_id: str, step_id: str, action_hash: str) -> str:
    """Stable for one action of one step of one run: a retry sends the same key."""
    return (
        "idem-"
        + digest_hex(canonical_hash({"run": run_id, "step": step_id, "action": action_hash}))[:40]
    )


def provider_request_id(key: str) -> str:
    """The id the provider is asked to file the request under (used to reconcile later)."""
    return "preq-" + key.removeprefix("idem-")[:32]


class SideEffectLedger:
    def __init__(self, recorder: RunRecorder) -> None:
        self.recorder = recorder

    async def _transition(
        self, record: SideEffectRecord, *, durable: bool = True, **changes: Any
    ) -> SideEffectRecord:
        """Record ``record`` changed by ``changes``; ``durable``: wait until it (and all before
        it) is committed. The intent is durable before the provider is called (the write-ahead
        rule: EXECUTING, with the PLANNED before it). A CONFIRMED or FAILED outcome is handed
        to the writer and made durable at the run's next durable point — the next write's
        intent or the run's end — so nothing the run does outside learns of the outcome before
        it is durable; a crash before that leaves the write EXECUTING, which the lease sweep
        turns UNKNOWN (reconciled, never retried on a guess)."""
        updated = record.model_copy(update=changes)
        await self.recorder.record(
            ExecutionEventType.SIDE_EFFECT, record=updated, step_id=record.step_id, durable=durable
        )
        return updated

    async def execute(
        self, *, capability_id: str, step_id: str, action_hash: str, call: ProviderCall
    ) -> tuple[SideEffectRecord, dict[str, Any] | None]:
        """Run one write through the state machine; returns the final record and the receipt."""
        run_id = self.recorder.run_id
        key = idempotency_key(run_id, step_id, action_hash)
        planned = SideEffectRecord(
            side_effect_id=f"se-{key.removeprefix('idem-')[:24]}",
            run_id=run_id,
            step_id=step_id,
            capability_id=capability_id,
            idempotency_key=key,
            action_hash=action_hash,
            status=SideEffectStatus.PLANNED,
            provider_request_id=provider_request_id(key),
        )
        # durable with the EXECUTING right after it (one commit, before the provider is called)
        await self._transition(planned, durable=False)
        return await self._attempt(planned, call)

    async def _attempt(
        self, record: SideEffectRecord, call: ProviderCall
    ) -> tuple[SideEffectRecord, dict[str, Any] | None]:
        executing = await self._transition(record, status=SideEffectStatus.EXECUTING)
        try:
            receipt = await call(executing.idempotency_key, executing.provider_request_id or "")
        except definitive_errors(call) as exc:
            failed = await self._transition(
                executing,
                durable=False,
                status=SideEffectStatus.FAILED,
                provider_receipt=f"rejected: {exc}",
            )
            return failed, None
        except BaseException as exc:
            # dispatched and then anything at all (a timeout, a reset connection, a bug, a
            # cancellation): the write may have happened, so the outcome is UNKNOWN, never
            # EXECUTING for good and never FAILED (which would allow a retry)
            unknown = await self._transition(
                executing, status=SideEffectStatus.UNKNOWN, provider_receipt=unknown_evidence(exc)
            )
            if not isinstance(exc, Exception):
                raise  # a cancellation or an exit goes on once the evidence is recorded
            return unknown, None
        confirmed = await self._transition(
            executing,
            durable=False,
            status=SideEffectStatus.CONFIRMED,
            provider_receipt=str(
                receipt.get("receipt") or receipt.get("id") or canonical_hash(receipt)
            ),
            executed_at=self.recorder.logical_time(),
        )
        return confirmed, receipt


def check_retry_allowed(record: SideEffectRecord) -> None:
    """Refuse a retry unless the write is proved not applied (FAILED, or RECONCILED not
    applied): ``ReconciliationRequiredError`` for UNKNOWN, ``RetryNotAllowedError`` otherwise.
    Pure: callers check it before they read anything else about the write (its raw arguments)."""
    status = record.status
    if status is SideEffectStatus.UNKNOWN:
        raise ReconciliationRequiredError(
            f"reconciliation required: side effect {record.side_effect_id} ({record.capability_id}) is "
            "UNKNOWN; its outcome must be reconciled with the provider before any retry"
        )
    proved_not_applied = status is SideEffectStatus.FAILED or (
        status is SideEffectStatus.RECONCILED and record.reconciled_applied is False
    )
    if not proved_not_applied:
        raise RetryNotAllowedError(
            f"side effect {record.side_effect_id} is {status.value}"
            + (" (applied)" if record.reconciled_applied else "")
            + ": only an effect proved not applied may be retried"
        )


async def retry_side_effect(
    evidence: EvidenceReader, recorder: RunRecorder, side_effect_id: str, call: ProviderCall
) -> tuple[SideEffectRecord, dict[str, Any] | None]:
    """Retry a write only when it is proved not applied; never touch the provider otherwise."""
    record: SideEffectRecord = await evidence.record(SideEffectRecord, side_effect_id)
    check_retry_allowed(record)
    return await SideEffectLedger(recorder)._attempt(record, call)


async def settle_interrupted_retry(
    recorder: RunRecorder, record: SideEffectRecord
) -> SideEffectRecord:
    """A retry whose worker stopped after EXECUTING was recorded: whether the provider heard
    of it cannot be known, so the write is UNKNOWN again (reconcile before anything else);
    it is never called a second time on a guess."""
    return await SideEffectLedger(recorder)._transition(
        record,
        status=SideEffectStatus.UNKNOWN,
        provider_receipt="outcome unknown: the retry stopped while the provider call was in flight",
    )
