"""Incident activities: thin Temporal shells over freezing, reconciliation, signatures,
regression cases and reports. Reconciliation is read-only at the provider and may retry."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import structlog
from temporalio import activity

from activities import observe
from activities.heartbeat import heartbeating
from forensics.failure_facts import gather_failure_facts
from forensics.freeze import freeze_evidence
from forensics.reconcile import SideEffectReconciler, reconcile_side_effect, resolve_by_human
from forensics.regression_cases import derived_assertions, human_assertions, regression_case_for
from models import EvidenceFreezeRequest, EvidenceType, SideEffectRecord, SideEffectStatus
from models.canonical import canonicalize
from models.enums import AgentFailureType, RunStatus
from models.errors import NotFoundError
from models.evidence import PromptArtifact
from models.execution import RunRecord
from models.fork_points import ForkPoint, rank_fork_points
from models.freeze import FreezeRecord
from models.incident_flow import (
    FreezeSummary,
    IncidentPhase,
    IncidentView,
    ReconcileOutcome,
    RootCauseConfirmation,
    SideEffectResolution,
    SignatureResult,
)
from models.regression import RegressionCase, evaluate_case
from models.signatures import classify
from models.watch import WatchCounts, WatchedRun, advance, carries_fix, recurred
from runtime.privacy.appending import appending_recorder, run_appender
from runtime.recorder import RunRecorder
from runtime.trajectory import load_trajectory
from stores.bundle import Stores
from stores.sql.incidents import SqlIncidentStore
from stores.sql.side_effect_leases import sweep_expired_side_effects

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
        console_url: str | None = None,
    ) -> None:
        self.stores = stores
        self.incidents = incidents
        self.reconcilers = reconcilers
        #: the web console's root (``REPLAYBOOK_CONSOLE_URL``): the HTML report links back to it
        self.console_url = console_url

    @activity.defn(name="freeze_incident_evidence")
    async def freeze_incident_evidence(
        self, incident_id: str, run_id: str, retention_days: int, frozen_at: datetime
    ) -> FreezeSummary:
        """Verify the run's chain, put every artifact its evidence references on legal hold
        with retention ``retention_days`` from ``frozen_at``, record the freeze in the incident
        store and return its summary. Idempotent: the time comes from the workflow and the
        freeze id from the incident and run.

        Never deletes evidence or shortens a retention, and appends nothing to the run but the
        UNKNOWN of a side effect left EXECUTING past its lease (swept first, so the frozen
        evidence says what is known: that its outcome is not)."""
        async with heartbeating(incident_id):
            record = await self._freeze(incident_id, run_id, retention_days, frozen_at)
        await self.incidents.record_freeze(record)
        # the frozen head also goes outside the database: the freeze record above is a row an
        # attacker with the database could rewrite along with the run
        await self.stores.ledger.anchor(run_id)
        return FreezeSummary(
            freeze_id=record.freeze_id,
            artifact_count=len(record.artifact_digests),
            chain_head_sequence=record.chain_head_sequence,
            chain_head_hash=record.chain_head_hash,
            retention_until=record.retention_until,
            enforced_by_backend=record.enforced_by_backend,
        )

    async def _freeze(
        self, incident_id: str, run_id: str, retention_days: int, frozen_at: datetime
    ) -> FreezeRecord:
        s = self.stores
        await sweep_expired_side_effects(s.ledger, s.side_effect_lease_seconds, run_id=run_id)
        request = EvidenceFreezeRequest(
            run_id=run_id,
            incident_id=incident_id,
            types=FREEZE_TYPES,
            retention_until=frozen_at + timedelta(days=retention_days),
        )
        # the time comes from the workflow, so a retried activity freezes identically
        freeze_id = f"{incident_id}:{run_id}"
        return await freeze_evidence(
            s.ledger, s.evidence, s.artifacts, request, freeze_id=freeze_id, now=frozen_at
        )

    @activity.defn(name="unknown_side_effects")
    async def unknown_side_effects(self, run_id: str) -> list[str]:
        """The ids of the run's side effects whose outcome is UNKNOWN. Reads the evidence
        only: writes nothing and contacts no provider (``agent_unknown_side_effect_total``
        counted each when it was recorded, not here)."""
        effects: list[SideEffectRecord] = await self.stores.evidence.records(
            SideEffectRecord, run_id
        )
        return [e.side_effect_id for e in effects if e.status is SideEffectStatus.UNKNOWN]

    async def _recorder(self, run_id: str) -> RunRecorder:
        # the RECONCILED copy is sanitized under the run's pinned policy, its raw form sealed
        return await run_appender(self.stores.ledger, self.stores.artifacts, run_id)

    @activity.defn(name="reconcile_side_effect")
    async def reconcile_side_effect(self, run_id: str, side_effect_id: str) -> ReconcileOutcome:
        """Ask the providers, read-only, whether the UNKNOWN side effect was applied; a
        conclusive answer is appended to the run's chain as RECONCILED, an inconclusive one
        leaves it UNKNOWN and says a human is needed. Safe to retry.

        Never executes or retries the write itself."""
        run = await self.stores.ledger.get_run(run_id)
        result = await reconcile_side_effect(
            self.stores.evidence,
            appending_recorder(self.stores.ledger, self.stores.artifacts, run),
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
        """Append a person's verdict on the side effect (applied or not, on what evidence, who
        decided) to the run's chain as RECONCILED. Safe to retry; a contradicting verdict is
        refused.

        Contacts no provider and never executes or retries the write."""
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
        """Classify the run's failure from its recorded facts into a failure type and
        signature. Reads the ledger and evidence only; writes nothing and guesses no root
        cause."""
        return await self._signature(run_id, prompt_swap_fixes=False)

    @activity.defn(name="sign_failure_with_replays")
    async def sign_failure_with_replays(
        self, incident_id: str, run_id: str, prompt_swap_fixes: bool
    ) -> SignatureResult:
        """Classify again once the counterfactuals ran, adding what they showed (a prompt swap
        that stops the failure); the same reads as ``sign_failure``, no writes."""
        return await self._signature(run_id, prompt_swap_fixes=prompt_swap_fixes)

    async def _signature(self, run_id: str, *, prompt_swap_fixes: bool) -> SignatureResult:
        facts = await gather_failure_facts(self.stores.ledger, self.stores.evidence, run_id)
        if prompt_swap_fixes:
            facts = facts.model_copy(update={"prompt_swap_fixes": True})
        c = classify(facts)
        # counted now so that a confirmation can be refused when it brings no expectation and
        # the facts yield none either (every confirmed incident leaves a regression case)
        source = await load_trajectory(self.stores.ledger, run_id)
        return SignatureResult(
            failure_type=c.failure_type.value,
            signature=c.signature,
            key=c.key,
            explanation=c.explanation,
            builtin_assertions=len(derived_assertions(facts, source)),
            contributing=c.contributing,
        )

    @activity.defn(name="rank_fork_points")
    async def rank_fork_points(
        self, run_id: str, first_divergences: list[str | None]
    ) -> list[ForkPoint]:
        """The run's candidate fork points, best first, from its trajectory and the first
        divergences of the incident's replays so far. Reads the ledger only."""
        source = await load_trajectory(self.stores.ledger, run_id)
        return rank_fork_points(source, first_divergences)

    @activity.defn(name="watch_runs")
    async def watch_runs(self, view: IncidentView, counts: WatchCounts) -> WatchCounts:
        """The recurrence watch's next look: judge the source graph's runs recorded since the
        cursor (not replays, not the incident's own run, only finished ones and only those
        after the watch began): does each carry the fix version, and does the failure recur
        in it (same signature, or the regression case fails)? Reads only."""
        s = self.stores
        assert view.confirmation is not None and view.signature is not None
        source = await s.ledger.get_run(view.source_run_id)
        case = None
        if view.regression_case_id:
            case = await self.incidents.get_case(view.regression_case_id)
        # from the cursor, or from the watch's start on the first look: the query returns a
        # bounded page oldest first, so starting at the graph's first run would judge only runs
        # older than the watch once the graph has more runs than a page, and never advance
        since = counts.cursor if counts.cursor is not None else counts.started_at
        rows = await s.run_views.runs_of_graph_since(source.graph_id, since)
        judged: list[WatchedRun] = []
        for row in rows:
            run = RunRecord.model_validate(row)
            skip = run.run_id in counts.seen_at_cursor or run.run_id == view.source_run_id
            if skip or run.labels.get("kind") == "replay":
                continue
            if counts.started_at and run.created_at < counts.started_at:
                continue
            if run.status is RunStatus.RUNNING:
                break  # the cursor must not pass a run that has not finished yet
            judged.append(await self._judge(run, view, case))
        return advance(counts, judged)

    async def _judge(
        self, run: RunRecord, view: IncidentView, case: RegressionCase | None
    ) -> WatchedRun:
        assert view.confirmation is not None and view.signature is not None
        s = self.stores
        prompts = [a.template_version for a in await s.evidence.records(PromptArtifact, run.run_id)]
        fixed = carries_fix(run, view.confirmation.fix_version, prompts)
        if not fixed:
            return WatchedRun(
                run_id=run.run_id, created_at=run.created_at, carries_fix=False, recurred=False
            )
        signature = classify(await gather_failure_facts(s.ledger, s.evidence, run.run_id)).signature
        failed = (
            case is not None
            and not evaluate_case(case, await load_trajectory(s.ledger, run.run_id)).passed
        )
        again = recurred(signature, view.signature.signature, failed)
        why = f"signature {signature}" + ("; the regression case fails" if failed else "")
        return WatchedRun(
            run_id=run.run_id, created_at=run.created_at, carries_fix=True, recurred=again, why=why
        )

    @activity.defn(name="save_incident")
    async def save_incident(self, view: IncidentView) -> None:
        """Upsert the incident's row (phase, signature, the whole view) in the incident store;
        a COMPLETED or FAILED incident is counted. Touches neither the run's chain nor its
        evidence."""
        sig = view.signature
        # the human's failure type, once confirmed, is the one incidents are counted under;
        # the automatic one stays in the view (``signature.failure_type``)
        await self.incidents.save_incident(
            incident_id=view.incident_id,
            source_run_id=view.source_run_id,
            failure_type=view.failure_type,
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
        """The id of the regression case built from the failure and the confirmed root cause,
        written once (a retry finds the case already there); None when the failure yields no
        case. Writes only to the incident store; runs no replay and changes no run."""
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
            extra=human_assertions(confirmation.expectations, source),
            now=_now(),
            # the human's type wins over the automatic one (which stays in the view)
            failure_type=confirmation.failure_type
            or (AgentFailureType(view.signature.failure_type) if view.signature else None),
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
        """Gather the incident's report bundle and store it rendered as JSON, Markdown and
        HTML, plus the canonical bundle, in the artifact store; returns their references.
        Writes only artifacts: appends nothing to any run and changes no incident."""
        from forensics.report import render_html, render_json, render_markdown
        from forensics.report_gather import report_bundle

        async with heartbeating(view.incident_id):
            bundle = await report_bundle(
                self.stores.ledger, self.stores.evidence, self.incidents, view
            )
        refs = {}
        for fmt, render in (("json", render_json), ("md", render_markdown)):
            refs[fmt] = await self.stores.artifacts.put(render(bundle).encode())
        html = render_html(bundle, console_url=self.console_url)
        refs["html"] = await self.stores.artifacts.put(html.encode())
        refs["bundle"] = await self.stores.artifacts.put(
            canonicalize(bundle.model_dump(mode="json"))
        )
        return refs


def new_incident_id() -> str:
    return f"INC-{datetime.now(UTC):%Y%m%d}-{uuid.uuid4().hex[:6]}"
