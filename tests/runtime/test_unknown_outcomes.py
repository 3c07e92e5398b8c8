"""UNKNOWN whenever a write's outcome cannot be known (rule 5), on SQLite and PostgreSQL:
whatever an adapter raises after dispatch — here the builtin ``TimeoutError`` once the refund
is committed — the side effect is UNKNOWN with the error as evidence, reconciles as applied
and is never retried; only an error the adapter declares definitive is FAILED; a side effect
left EXECUTING by a dead process becomes UNKNOWN once its lease has passed.
``agent_unknown_side_effect_total`` counts each UNKNOWN once, when it is recorded."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from examples.support_desk.reconcilers import support_desk_reconcilers
from forensics.reconcile import ReconciliationOutcome, reconcile_side_effect
from models import RunRecord, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash
from models.errors import ReconciliationRequiredError, RetryNotAllowedError
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger, retry_side_effect
from runtime.tools import ToolCallContext
from stores.sql.side_effect_leases import sweep_expired_side_effects
from tests.runtime.conftest import Recording

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
ARGUMENTS = {"order_id": "o-1001", "amount": "25.00", "currency": "EUR"}


async def _recorder(rec: Recording, run_id: str) -> RunRecorder:
    await rec.ledger.create_run(
        RunRecord(run_id=run_id, graph_id="test", graph_version="1", created_at=T0)
    )
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    recorder.step_id = "act"
    return recorder


def unknown_count() -> float:
    """``agent_unknown_side_effect_total`` of refunds in this process."""
    value = REGISTRY.get_sample_value(
        "agent_unknown_side_effect_total", {"capability": "payment.refund"}
    )
    return value or 0.0


async def _never(key: str, preq: str) -> dict[str, Any]:
    raise AssertionError("the provider must not be reached")


async def test_a_builtin_timeout_after_the_refund_is_unknown_reconciled_applied_never_retried(
    rec: Recording,
) -> None:
    run_id = f"timeout-builtin-{rec.db.dialect}"
    recorder = await _recorder(rec, run_id)

    async def refund_then_time_out(key: str, preq: str) -> dict[str, Any]:
        await rec.world.payment_refund(ARGUMENTS, ToolCallContext(run_id, T0, key, preq))
        raise TimeoutError("read timed out")  # committed at the provider, answer lost

    counted = unknown_count()
    effect, receipt = await SideEffectLedger(recorder).execute(
        capability_id="payment.refund",
        step_id="act",
        action_hash=canonical_hash(ARGUMENTS),
        call=refund_then_time_out,
    )
    assert receipt is None and effect.status is SideEffectStatus.UNKNOWN
    assert effect.provider_receipt == "outcome unknown: TimeoutError: read timed out"
    assert unknown_count() == counted + 1  # counted when recorded
    refunds = await rec.world.call_count("payments", "refund")

    with pytest.raises(ReconciliationRequiredError):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, _never)
    done = await reconcile_side_effect(
        rec.evidence, recorder, support_desk_reconcilers(rec.world), effect.side_effect_id
    )
    assert done.result is not None and done.result.outcome is ReconciliationOutcome.APPLIED
    assert done.record.reconciled_applied is True
    with pytest.raises(RetryNotAllowedError):
        await retry_side_effect(rec.evidence, recorder, effect.side_effect_id, _never)
    assert await rec.world.call_count("payments", "refund") == refunds
    assert (await rec.ledger.verify(run_id)).intact
    assert unknown_count() == counted + 1  # reconciling it counts nothing more


class _Refused(Exception):
    """An adapter's own error that it raises before sending anything."""


async def test_only_a_declared_definitive_error_is_failed(rec: Recording) -> None:
    recorder = await _recorder(rec, f"definitive-{rec.db.dialect}")

    async def refuse(key: str, preq: str) -> dict[str, Any]:
        raise _Refused("invalid IBAN")

    async def crash(key: str, preq: str) -> dict[str, Any]:
        raise ConnectionResetError("connection reset by peer")

    refuse.definitive_errors = (_Refused,)  # type: ignore[attr-defined]
    ledger = SideEffectLedger(recorder)
    counted = unknown_count()
    failed, _ = await ledger.execute(
        capability_id="payment.refund", step_id="a", action_hash=canonical_hash(1), call=refuse
    )
    unknown, _ = await ledger.execute(
        capability_id="payment.refund", step_id="b", action_hash=canonical_hash(2), call=crash
    )
    assert failed.status is SideEffectStatus.FAILED
    assert unknown.status is SideEffectStatus.UNKNOWN
    assert unknown_count() == counted + 1  # the UNKNOWN only, not the definitive refusal
    assert (
        unknown.provider_receipt is not None and "ConnectionResetError" in unknown.provider_receipt
    )


async def test_executing_past_its_lease_becomes_unknown_once(rec: Recording) -> None:
    run_id = f"lease-{rec.db.dialect}"
    recorder = await _recorder(rec, run_id)
    executing = SideEffectRecord(
        side_effect_id=f"se-{run_id}",
        run_id=run_id,
        step_id="act",
        capability_id="payment.refund",
        idempotency_key=f"idem-{run_id}",
        action_hash=canonical_hash(ARGUMENTS),
        status=SideEffectStatus.EXECUTING,
        provider_request_id=f"preq-{run_id}",
    )
    # what a process SIGKILLed mid-write leaves: EXECUTING and nothing after it
    await SideEffectLedger(recorder)._transition(executing)
    now = rec.ledger.clock()
    counted = unknown_count()
    assert await sweep_expired_side_effects(rec.ledger, 60, now, run_id=run_id) == []
    assert unknown_count() == counted  # EXECUTING within its lease is not unknown yet
    later = now + timedelta(seconds=61)
    (swept,) = await sweep_expired_side_effects(rec.ledger, 60, later, run_id=run_id)
    assert unknown_count() == counted + 1
    assert swept.status is SideEffectStatus.UNKNOWN and "lease expired" in (
        swept.provider_receipt or ""
    )
    assert await sweep_expired_side_effects(rec.ledger, 60, later, run_id=run_id) == []
    assert unknown_count() == counted + 1  # swept once, counted once
    stored = await rec.evidence.record(SideEffectRecord, executing.side_effect_id)
    assert stored.status is SideEffectStatus.UNKNOWN
    assert (await rec.ledger.verify(run_id)).intact
