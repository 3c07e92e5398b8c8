"""What really happened to each write of an incident's source run, for the report's first
section: the status history from the chained ``SIDE_EFFECT`` events, the reconciliation result
(or a human's resolution) with its evidence, and the provider's receipt and request id."""

from __future__ import annotations

import json
from typing import Any

from models import ExecutionEventType, SideEffectRecord
from models.incident_flow import IncidentView
from models.report_bundle import SideEffectStatusChange, SideEffectTruth
from runtime.ports import EventLedger, EvidenceReader

_SIDE_EFFECT_EVENTS = frozenset({ExecutionEventType.SIDE_EFFECT})


def applied_of(status: str, reconciled_applied: bool | None) -> bool | None:
    """Whether a write took effect, as far as its status says (None: not known)."""
    if status == "CONFIRMED":
        return True
    if status == "FAILED":
        return False
    if status == "RECONCILED":
        return reconciled_applied
    return None


def _record_of(payload: bytes | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) and "side_effect_id" in value else None


async def side_effect_truths(
    ledger: EventLedger, evidence: EvidenceReader, run_id: str, view: IncidentView
) -> tuple[SideEffectTruth, ...]:
    """Every side effect of ``run_id``, in the order the run first recorded it."""
    histories: dict[str, list[SideEffectStatusChange]] = {}
    latest: dict[str, dict[str, Any]] = {}
    events = await ledger.events_with_payloads(run_id, types=_SIDE_EFFECT_EVENTS, missing_ok=True)
    for event, payload in events:
        record = _record_of(payload)
        if record is None:
            continue
        sid = str(record["side_effect_id"])
        histories.setdefault(sid, []).append(
            SideEffectStatusChange(
                status=str(record.get("status")), sequence=event.sequence, at=event.recorded_at
            )
        )
        latest[sid] = record
    # the projection holds the settled state (a reconciliation recorded after the run ended)
    for current in await evidence.records(SideEffectRecord, run_id):
        latest[current.side_effect_id] = current.model_dump(mode="json")
        histories.setdefault(current.side_effect_id, [])
    outcomes = {o.side_effect_id: o for o in view.side_effects}
    return tuple(_truth(sid, latest[sid], histories[sid], outcomes.get(sid)) for sid in latest)


def _truth(
    sid: str, record: dict[str, Any], history: list[SideEffectStatusChange], outcome: Any
) -> SideEffectTruth:
    status = str(record.get("status"))
    applied = applied_of(status, record.get("reconciled_applied"))
    reconciliation = evidence = None
    if outcome is not None:
        if outcome.needs_human and outcome.applied is None:
            reconciliation = f"{outcome.status}: waiting for a human"
        else:
            known = {True: "applied", False: "not applied"}.get(outcome.applied, "outcome unknown")
            reconciliation = f"{outcome.status}: {known}"
        evidence = outcome.reason or None
        if applied is None and outcome.applied is not None:
            applied = outcome.applied
    return SideEffectTruth(
        side_effect_id=sid,
        capability_id=str(record.get("capability_id", "")),
        step_id=str(record.get("step_id", "")),
        status=status,
        applied=applied,
        history=tuple(history),
        reconciliation=reconciliation,
        evidence=evidence,
        provider_request_id=record.get("provider_request_id"),
        provider_receipt=record.get("provider_receipt"),
        idempotency_key=record.get("idempotency_key"),
    )
