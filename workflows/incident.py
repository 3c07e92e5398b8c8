"""IncidentWorkflow: FREEZING → RECONCILING → SIGNING → REPLAYING → COUNTERFACTUALS →
AWAITING_CONFIRMATION → CREATING_REGRESSION_CASE → REPORTING → COMPLETED (or FAILED).

The workflow waits durably (days, if need be) for people: a side effect whose outcome no
reconciler could establish waits for ``resolve_side_effect``; the root cause waits for
``confirm_root_cause``, an update validated to cite at least one replay of this incident.
Nothing here guesses a root cause (rule 18).
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models import ReplayConfidence
    from models.budget import BudgetUsage, remaining, shares
    from models.incident_flow import (
        Counterfactual,
        IncidentPhase,
        IncidentReplay,
        IncidentRequest,
        IncidentView,
        PendingTask,
        ReconcileOutcome,
        RootCauseConfirmation,
        SideEffectResolution,
        TimelineEntry,
    )
    from models.queues import CONTROL_QUEUE
    from models.replay import ReplayBudget
    from models.replay_flow import ReplayOutcome, ReplayWorkflowInput
    from models.replay_plans import plan_for_candidates
    from models.verdicts import outcome_summary
    from workflows.replay import HEARTBEAT, ReplayWorkflow

INCIDENT_ID = SearchAttributeKey.for_keyword("IncidentId")
INCIDENT_PHASE = SearchAttributeKey.for_keyword("IncidentPhase")
SOURCE_RUN_ID = SearchAttributeKey.for_keyword("SourceRunId")
FAILURE_SIGNATURE = SearchAttributeKey.for_keyword("FailureSignature")

RETRY = RetryPolicy(
    maximum_attempts=10,
    non_retryable_error_types=[
        "InvalidInputError",
        "ChainBrokenError",
        "NotFoundError",
        "RunNotFoundError",
    ],
)
# short activities (store reads and writes): a worker that died holding one is noticed quickly
SHORT = timedelta(seconds=20)


@workflow.defn(name="Incident")
class IncidentWorkflow:
    def __init__(self) -> None:
        self._view: IncidentView | None = None
        self._confirmation: RootCauseConfirmation | None = None
        #: what the incident's replays have spent of its one budget, and since when
        self._spent = BudgetUsage()
        self._replaying_since: datetime | None = None

    # queries and updates ------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> IncidentView | None:
        """The incident as it stands: phase, timeline, side effects, replays and pending tasks
        (None before the run starts). Reads the workflow's own state only; changes nothing."""
        return self._view

    @workflow.update(name="resolve_side_effect")
    async def resolve_side_effect(self, resolution: SideEffectResolution) -> ReconcileOutcome:
        """Record a person's verdict on a side effect waiting for one (applied or not, the
        evidence, who decided), through an activity, and drop its pending task. It never
        executes or retries the side effect itself, and accepts only a side effect that is
        waiting (see the validator)."""
        assert self._view is not None
        outcome: ReconcileOutcome = await workflow.execute_activity_method(
            IncidentActivities.resolve_side_effect_by_human,
            args=[self._view.source_run_id, resolution],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self._update(
            side_effects=tuple(
                outcome if s.side_effect_id == outcome.side_effect_id else s
                for s in self._view.side_effects
            ),
            pending=tuple(
                p for p in self._view.pending if p.side_effect_id != resolution.side_effect_id
            ),
        )
        self._event(
            self._view.phase,
            f"{resolution.side_effect_id} resolved by {resolution.resolved_by}: {resolution.outcome}",
        )
        return outcome

    @resolve_side_effect.validator
    def _validate_resolution(self, resolution: SideEffectResolution) -> None:
        """Refuses a side effect not waiting for a human, or a verdict without evidence or
        author. Reads state only."""
        if self._view is None or not any(
            p.side_effect_id == resolution.side_effect_id for p in self._view.pending
        ):
            waiting = [
                p.side_effect_id
                for p in (self._view.pending if self._view else ())
                if p.side_effect_id
            ]
            raise ValueError(
                f"side effect {resolution.side_effect_id} is not waiting for a human (waiting: {', '.join(waiting) or 'none'})"
            )
        if not resolution.evidence.strip() or not resolution.resolved_by.strip():
            raise ValueError("a resolution needs the evidence it rests on and who decided")

    @workflow.update(name="confirm_root_cause")
    async def confirm_root_cause(self, confirmation: RootCauseConfirmation) -> str:
        """Accept a person's root cause (validated to cite replays of this incident), which lets
        the lifecycle go on to the regression case. Only stores it: runs no activity, and the
        workflow never proposes a root cause itself (rule 18)."""
        self._confirmation = confirmation
        return "confirmed"

    @confirm_root_cause.validator
    def _validate_confirmation(self, confirmation: RootCauseConfirmation) -> None:
        """Refuses a confirmation before AWAITING_CONFIRMATION, a second one, empty fields, or
        one citing no replay (or a foreign replay) of this incident. Reads state only."""
        if self._view is None or self._view.phase is not IncidentPhase.AWAITING_CONFIRMATION:
            phase = self._view.phase.value if self._view else "not started"
            raise ValueError(
                f"the incident is {phase}, not AWAITING_CONFIRMATION: replays must finish first"
            )
        if self._confirmation is not None:
            raise ValueError("the root cause is already confirmed")
        for field in ("root_cause", "fix_version", "verified_by"):
            if not getattr(confirmation, field).strip():
                raise ValueError(f"{field} must not be empty")
        known = {r.replay_id for r in self._view.replays}
        cited = set(confirmation.replay_ids)
        if not cited & known:
            raise ValueError(
                f"the confirmation must cite at least one replay of this incident ({', '.join(sorted(known))})"
            )
        unknown = cited - known
        if unknown:
            raise ValueError(f"not replays of this incident: {', '.join(sorted(unknown))}")
        for replay in self._view.replays:
            if replay.replay_id in cited and replay.runs and not replay.conclusive_runs:
                raise ValueError(
                    f"replay {replay.replay_id} ({replay.label}) has no conclusive run "
                    f"({replay.inconclusive} inconclusive): it cannot support a root cause"
                )

    # the lifecycle ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, request: IncidentRequest) -> IncidentView:
        """Take an incident through its lifecycle: freeze the run's evidence, reconcile side
        effects of unknown outcome (waiting for people where no reconciler can tell), sign the
        failure, replay the run exactly and with each counterfactual as child workflows, wait
        for a person to confirm the root cause, create the regression case and the report. An
        activity or child replay failing for good ends it FAILED; the view is returned.

        Deterministic: no I/O and no clock but ``workflow.now()``; every store read or write
        goes through an activity, and it never guesses a root cause or decides a side effect's
        outcome on its own. Its history carries ids, hashes and the small incident view,
        never the run's payloads.
        """
        self._view = IncidentView(
            incident_id=request.incident_id, source_run_id=request.source_run_id
        )
        workflow.upsert_search_attributes(
            [
                INCIDENT_ID.value_set(request.incident_id),
                SOURCE_RUN_ID.value_set(request.source_run_id),
            ]
        )
        try:
            await self._lifecycle(request)
        except (ActivityError, ChildWorkflowError) as exc:
            reason = str(exc.cause or exc)
            self._update(error=reason)
            await self._enter(IncidentPhase.FAILED, reason)
            workflow.logger.warning("incident %s failed: %s", request.incident_id, reason)
        return self._view

    async def _lifecycle(self, request: IncidentRequest) -> None:
        await self._freeze(request)
        await self._reconcile(request)
        await self._sign(request)
        await self._enter(IncidentPhase.REPLAYING)
        await self._replays(request, [None])
        await self._enter(IncidentPhase.COUNTERFACTUALS)
        await self._replays(request, list(request.counterfactuals))
        await self._await_confirmation(request)
        await self._create_regression_case()
        await self._report()
        await self._enter(IncidentPhase.COMPLETED)

    async def _freeze(self, request: IncidentRequest) -> None:
        """FREEZING: the run's evidence frozen under retention, its summary kept in the view."""
        await self._enter(IncidentPhase.FREEZING)
        freeze = await workflow.execute_activity_method(
            IncidentActivities.freeze_incident_evidence,
            args=[
                request.incident_id,
                request.source_run_id,
                request.retention_days,
                workflow.now(),
            ],
            start_to_close_timeout=timedelta(minutes=10),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
        self._update(freeze=freeze)

    async def _reconcile(self, request: IncidentRequest) -> None:
        """RECONCILING: each side effect of unknown outcome reconciled; waits until a human has
        resolved every one no reconciler could establish."""
        await self._enter(IncidentPhase.RECONCILING)
        unknown: list[str] = await workflow.execute_activity_method(
            IncidentActivities.unknown_side_effects,
            request.source_run_id,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        outcomes = []
        for side_effect_id in unknown:
            outcomes.append(
                await workflow.execute_activity_method(
                    IncidentActivities.reconcile_side_effect,
                    args=[request.source_run_id, side_effect_id],
                    start_to_close_timeout=SHORT,
                    retry_policy=RETRY,
                )
            )
        pending = _resolution_tasks(request, outcomes)
        self._update(side_effects=tuple(outcomes), pending=pending)
        await self._save()
        await workflow.wait_condition(
            lambda: not any(p.kind == "resolve_side_effect" for p in self._current.pending)
        )

    async def _sign(self, request: IncidentRequest) -> None:
        """SIGNING: the failure's signature, kept in the view and as a search attribute."""
        await self._enter(IncidentPhase.SIGNING)
        signature = await workflow.execute_activity_method(
            IncidentActivities.sign_failure,
            args=[request.incident_id, request.source_run_id],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self._update(signature=signature)
        workflow.upsert_search_attributes([FAILURE_SIGNATURE.value_set(signature.signature)])
        await self._save()

    async def _await_confirmation(self, request: IncidentRequest) -> None:
        """AWAITING_CONFIRMATION: waits for ``confirm_root_cause`` and records who confirmed."""
        await self._enter(IncidentPhase.AWAITING_CONFIRMATION)
        self._update(
            pending=(
                *self._current.pending,
                PendingTask(
                    kind="confirm_root_cause",
                    detail=f"replaybook incident confirm {request.incident_id} --root-cause TEXT --fix-version V --verified-by NAME",
                ),
            )
        )
        await self._save()
        await workflow.wait_condition(lambda: self._confirmation is not None)
        assert self._confirmation is not None
        self._update(
            confirmation=self._confirmation,
            pending=tuple(p for p in self._current.pending if p.kind != "confirm_root_cause"),
        )
        self._event(
            IncidentPhase.AWAITING_CONFIRMATION, f"confirmed by {self._confirmation.verified_by}"
        )

    async def _create_regression_case(self) -> None:
        """CREATING_REGRESSION_CASE: the case (if the failure yields one) kept in the view."""
        await self._enter(IncidentPhase.CREATING_REGRESSION_CASE)
        case_id = await workflow.execute_activity_method(
            IncidentActivities.create_regression_case,
            args=[self._view, self._confirmation],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self._update(regression_case_id=case_id)

    async def _report(self) -> None:
        """REPORTING: the report's artifact references kept in the view."""
        await self._enter(IncidentPhase.REPORTING)
        refs = await workflow.execute_activity_method(
            IncidentActivities.build_incident_report,
            self._current,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
        self._update(report_refs=refs)

    async def _replays(
        self, request: IncidentRequest, counterfactuals: list[Counterfactual | None]
    ) -> None:
        handles = []
        allotments = self._allotments(request, len(counterfactuals))
        for index, cf in enumerate(counterfactuals):
            suffix = "exact" if cf is None else f"cf{index + 1}"
            plan = plan_for_candidates(
                request.source_run_id,
                {cf.kind: cf.value} if cf else {},
                replay_id=f"{request.incident_id}-{suffix}",
                sampling_seed=index + 1,
                miss=request.miss_policy,
                repeat=request.repeat,
            )
            if allotments is not None:
                plan = plan.model_copy(update={"budget": allotments[index]})
            handles.append(
                (
                    cf.label if cf else "exact",
                    workflow.execute_child_workflow(
                        ReplayWorkflow.run,
                        ReplayWorkflowInput(plan=plan),
                        id=plan.replay_id,
                        task_queue=CONTROL_QUEUE,
                    ),
                )
            )
        outcomes: list[ReplayOutcome] = await asyncio.gather(*(h for _, h in handles))
        replays = list(self._current.replays)
        for (label, _), outcome in zip(handles, outcomes, strict=True):
            replays.append(_incident_replay(label, outcome))
            self._spent = self._spent.plus(
                outcome.budget_used.model_copy(update={"duration_seconds": 0.0})
            )
        self._update(replays=tuple(replays))
        if workflow.patched("incident-verdict-memo"):
            # the inconclusive count where Temporal shows the incident (describe, Web UI)
            workflow.upsert_memo(
                {
                    "inconclusive": sum(r.inconclusive for r in replays),
                    "replays": len(replays),
                }
            )
        await self._save()

    def _allotments(self, request: IncidentRequest, n: int) -> list[ReplayBudget] | None:
        """Each of the ``n`` replays about to start gets an equal share of what is left of the
        incident's one budget (time from the first replay on); None without a budget (and
        in histories from before incident budgets)."""
        budget = request.budget
        if budget == ReplayBudget() or not n or not workflow.patched("incident-shared-budget"):
            return None
        if self._replaying_since is None:
            self._replaying_since = workflow.now()
        elapsed = (workflow.now() - self._replaying_since).total_seconds()
        left = remaining(budget, self._spent.model_copy(update={"duration_seconds": elapsed}))
        return shares(left, n)

    # bookkeeping ----------------------------------------------------------------------------

    @property
    def _current(self) -> IncidentView:
        """The view, which ``run`` makes before any phase."""
        assert self._view is not None
        return self._view

    def _update(self, **changes: object) -> None:
        assert self._view is not None
        self._view = self._view.model_copy(update=changes)

    def _event(self, phase: IncidentPhase, detail: str = "") -> None:
        assert self._view is not None
        entry = TimelineEntry(phase=phase.value, at=workflow.now(), detail=detail)
        self._update(timeline=(*self._view.timeline, entry))

    async def _enter(self, phase: IncidentPhase, detail: str = "") -> None:
        self._update(phase=phase)
        self._event(phase, detail)
        workflow.upsert_search_attributes([INCIDENT_PHASE.value_set(phase.value)])
        if phase in (IncidentPhase.COMPLETED, IncidentPhase.FAILED):
            await self._save()

    async def _save(self) -> None:
        await workflow.execute_activity_method(
            IncidentActivities.save_incident,
            self._current,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )


def _incident_replay(label: str, outcome: ReplayOutcome) -> IncidentReplay:
    """One replay as the incident shows it: its verdict counts, rate and interval over the
    conclusive runs; LIMITED when any run was inconclusive (issue 16)."""
    summary = outcome_summary(outcome)
    comparison = outcome.comparison
    ci = summary.get("ci95")
    inconclusive = int(summary.get("inconclusive") or 0)
    return IncidentReplay(
        replay_id=outcome.replay_id,
        label=label,
        mode=outcome.mode,
        status=outcome.status.value,
        confidence=ReplayConfidence.LIMITED if inconclusive else outcome.confidence,
        reproduced=summary.get("reproduced"),
        not_reproduced=summary.get("not_reproduced"),
        inconclusive=inconclusive,
        inconclusive_reasons=dict(summary.get("inconclusive_reasons") or {}),
        runs=summary.get("runs"),
        rate=summary.get("rate"),
        ci95=(ci[0], ci[1]) if isinstance(ci, list | tuple) else None,
        critical=bool(comparison and comparison.critical),
        first_divergent_step=comparison.first_divergent_step if comparison else None,
    )


def _resolution_tasks(
    request: IncidentRequest, outcomes: list[ReconcileOutcome]
) -> tuple[PendingTask, ...]:
    """A ``resolve_side_effect`` task for each reconciled side effect that needs a human."""
    return tuple(
        PendingTask(
            kind="resolve_side_effect",
            side_effect_id=o.side_effect_id,
            detail=f"{o.capability_id}: {o.reason} — replaybook incident resolve-side-effect "
            f"{request.incident_id} {o.side_effect_id} --outcome applied|not-applied --evidence TEXT",
        )
        for o in outcomes
        if o.needs_human
    )
