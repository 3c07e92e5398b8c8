"""Incident activities: thin Temporal shells over freezing, reconciliation, signatures,
regression cases and reports. Reconciliation is read-only at the provider and may retry."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from temporalio import activity

from activities import observe
from forensics.failure_facts import gather_failure_facts
from forensics.freeze import freeze_evidence
from forensics.reconcile import SideEffectReconciler, reconcile_side_effect, resolve_by_human
from forensics.regression_cases import regression_case_for
from models import EvidenceFreezeRequest, EvidenceType, SideEffectRecord, SideEffectStatus
from models.canonical import canonicalize
from models.errors import NotFoundError
from models.incident_flow import (
    FreezeSummary,
    IncidentPhase,
    IncidentView,
    ReconcileOutcome,
    RootCauseConfirmation,
    SideEffectResolution,
    SignatureResult,
)
from models.signatures import classify
from runtime.recorder import RunRecorder
from stores.bundle import Stores
from stores.sql.incidents import SqlIncidentStore
from stores.sql.trajectory import load_trajectory

log = structlog.get_logger(__name__)
FREEZE_TYPES = tuple(EvidenceType)


def _now() -> datetime:
    return datetime.now(UTC)


class IncidentActivities:
    def __init__(
        self,
        stores: Stores,
        incidents: SqlIncidentStore,
        reconcilers: Callable[[str], list[SideEffectReconciler]],
    ) -> None:
        self.stores = stores
        self.incidents = incidents
        self.reconcilers = reconcilers

    @activity.defn(name="freeze_incident_evidence")
    async def freeze_incident_evidence(
        self, incident_id: str, run_id: str, retention_days: int, frozen_at: datetime
    ) -> FreezeSummary:
        # the time comes from the workflow, so a retried activity freezes identically
        now = frozen_at
        request = EvidenceFreezeRequest(
            run_id=run_id,
            incident_id=incident_id,
            types=FREEZE_TYPES,
            retention_until=now + timedelta(days=retention_days),
        )
        s = self.stores
        record = await freeze_evidence(
            s.ledger, s.evidence, s.artifacts, request, freeze_id=f"{incident_id}:{run_id}", now=now
        )
        await self.incidents.record_freeze(record)
        return FreezeSummary(
            freeze_id=record.freeze_id,
            artifact_count=len(record.artifact_digests),
            chain_head_sequence=record.chain_head_sequence,
            chain_head_hash=record.chain_head_hash,
            retention_until=record.retention_until,
            enforced_by_backend=record.enforced_by_backend,
        )

    @activity.defn(name="unknown_side_effects")
    async def unknown_side_effects(self, run_id: str) -> list[str]:
        effects: list[SideEffectRecord] = await self.stores.evidence.records(
            SideEffectRecord, run_id
        )
        unknown = {
            e.side_effect_id: e.capability_id
            for e in effects
            if e.status is SideEffectStatus.UNKNOWN
        }
        # counted once per incident (the workflow id), however often the activity is retried
        observe.unknown_side_effects_found(activity.info().workflow_id, unknown)
        return list(unknown)

    async def _recorder(self, run_id: str) -> RunRecorder:
        return RunRecorder(self.stores.ledger, self.stores.artifacts, run_id)

    @activity.defn(name="reconcile_side_effect")
    async def reconcile_side_effect(self, run_id: str, side_effect_id: str) -> ReconcileOutcome:
        run = await self.stores.ledger.get_run(run_id)
        result = await reconcile_side_effect(
            self.stores.evidence,
            await self._recorder(run_id),
            self.reconcilers(run.graph_id),
            side_effect_id,
        )
        record = result.record
        log.info(
            "side effect reconciled",
            run_id=run_id,
            side_effect_id=side_effect_id,
            reason=result.reason,
        )
        outcome = ReconcileOutcome(
            side_effect_id=side_effect_id,
            capability_id=record.capability_id,
            status=record.status.value,
            applied=record.reconciled_applied,
            needs_human=result.needs_human,
            reason=result.reason,
        )
        observe.reconciled(outcome, by_human=False)
        return outcome

    @activity.defn(name="resolve_side_effect_by_human")
    async def resolve_side_effect_by_human(
        self, run_id: str, resolution: SideEffectResolution
    ) -> ReconcileOutcome:
        record = await resolve_by_human(
            self.stores.evidence,
            await self._recorder(run_id),
            resolution.side_effect_id,
            applied=resolution.outcome == "applied",
            evidence_text=resolution.evidence,
            resolved_by=resolution.resolved_by,
        )
        outcome = ReconcileOutcome(
            side_effect_id=record.side_effect_id,
            capability_id=record.capability_id,
            status=record.status.value,
            applied=record.reconciled_applied,
            needs_human=False,
            reason=f"resolved by {resolution.resolved_by}",
        )
        observe.reconciled(outcome, by_human=True)
        return outcome

    @activity.defn(name="sign_failure")
    async def sign_failure(self, incident_id: str, run_id: str) -> SignatureResult:
        facts = await gather_failure_facts(self.stores.ledger, self.stores.evidence, run_id)
        c = classify(facts)
        return SignatureResult(
            failure_type=c.failure_type.value,
            signature=c.signature,
            key=c.key,
            explanation=c.explanation,
        )

    @activity.defn(name="save_incident")
    async def save_incident(self, view: IncidentView) -> None:
        sig = view.signature
        await self.incidents.save_incident(
            incident_id=view.incident_id,
            source_run_id=view.source_run_id,
            failure_type=sig.failure_type if sig else None,
            signature=sig.signature if sig else None,
            signature_key=sig.key if sig else None,
            phase=view.phase.value,
            record=view.model_dump(mode="json"),
        )
        if view.phase in (IncidentPhase.COMPLETED, IncidentPhase.FAILED):
            observe.incident_ended(view)

    @activity.defn(name="create_regression_case")
    async def create_regression_case(
        self, view: IncidentView, confirmation: RootCauseConfirmation
    ) -> str | None:
        s = self.stores
        facts = await gather_failure_facts(s.ledger, s.evidence, view.source_run_id)
        source = await load_trajectory(s.ledger, view.source_run_id)
        case = regression_case_for(
            case_id=f"case-{view.incident_id}",
            incident_id=view.incident_id,
            source_run_id=view.source_run_id,
            facts=facts,
            source=source,
            description=f"{view.signature.signature if view.signature else 'incident'}: {confirmation.root_cause}",
            now=_now(),
        )
        if case is None:
            return None
        try:
            # a retried activity finds the case it already wrote (with its first created_at)
            await self.incidents.get_case(case.case_id)
        except NotFoundError:
            await self.incidents.put_case(case)
            observe.regression_case_created(case.case_id)
        return case.case_id

    @activity.defn(name="build_incident_report")
    async def build_incident_report(self, view: IncidentView) -> dict[str, str]:
        from activities.report_bundle import report_bundle
        from forensics.report import render_html, render_json, render_markdown

        bundle = await report_bundle(self.stores, view)
        refs = {}
        for fmt, render in (("json", render_json), ("md", render_markdown), ("html", render_html)):
            refs[fmt] = await self.stores.artifacts.put(render(bundle).encode())
        refs["bundle"] = await self.stores.artifacts.put(
            canonicalize(bundle.model_dump(mode="json"))
        )
        return refs


def new_incident_id() -> str:
    return f"INC-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:6]}"
