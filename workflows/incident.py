"""IncidentWorkflow: FREEZING → RECONCILING → SIGNING → REPLAYING → COUNTERFACTUALS →
AWAITING_CONFIRMATION → CREATING_REGRESSION_CASE → REPORTING → COMPLETED (or FAILED).

The workflow waits durably (days, if need be) for people: a side effect whose outcome no
reconciler could establish waits for ``resolve_side_effect``; the root cause waits for
``confirm_root_cause``, an update validated to cite at least one replay of this incident.
Nothing here guesses a root cause (rule 18).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ChildWorkflowError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.incident import IncidentActivities
    from models import ReplayConfidence
    from models.base import Record
    from models.budget import BudgetUsage, remaining, shares
    from models.enums import ReplayMode
    from models.errors import InvalidInputError
    from models.expectations import parse_expectation
    from models.fork_points import ForkPoint, ForkResult
    from models.incident_flow import (
        Counterfactual,
        IncidentPhase,
        IncidentReplay,
        IncidentRequest,
        IncidentView,
        PendingTask,
        ReconcileOutcome,
        RejectedSignal,
        RootCauseConfirmation,
        SideEffectResolution,
        TimelineEntry,
        prompt_swap_fixes,
    )
    from models.queues import CONTROL_QUEUE
    from models.replay import ReplayBudget
    from models.replay_flow import ReplayOutcome, ReplayWorkflowInput
    from models.replay_plans import build_replay_plan, plan_for_candidates
    from models.verdicts import outcome_summary
    from models.watch import WatchCounts
    from workflows.replay import HEARTBEAT, ReplayWorkflow
    from workflows.side_effect_retry import SideEffectRetryWorkflow

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
_Payload = TypeVar("_Payload", bound=Record)
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
        self._poked = False

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
        return await self._apply_resolution(resolution)

    @workflow.signal(name="resolve_side_effect")
    async def resolve_side_effect_signal(self, payload: Any) -> None:
        """The ``resolve_side_effect`` update as a signal, with the same payload (``temporal
        workflow signal --name resolve_side_effect --input '{…}'``). A payload that fails
        validation is kept in the view as a rejected signal with the reason, never dropped."""
        resolution = self._accept_signal(
            "resolve_side_effect", payload, SideEffectResolution, self._validate_resolution
        )
        if resolution is not None:
            await self._apply_resolution(resolution)

    async def _apply_resolution(self, resolution: SideEffectResolution) -> ReconcileOutcome:
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

    @workflow.signal(name="confirm_root_cause")
    def confirm_root_cause_signal(self, payload: Any) -> None:
        """The ``confirm_root_cause`` update as a signal, with the same payload and the same
        validation (``temporal workflow signal --name confirm_root_cause --input '{…}'``). A
        refused one is kept in the view as a rejected signal with the reason."""
        confirmation = self._accept_signal(
            "confirm_root_cause", payload, RootCauseConfirmation, self._validate_confirmation
        )
        if confirmation is not None:
            self._confirmation = confirmation

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
        for text in confirmation.expectations:
            try:
                parse_expectation(text)
            except InvalidInputError as exc:
                raise ValueError(str(exc)) from None
        signature = self._view.signature
        if not confirmation.expectations and signature and signature.builtin_assertions == 0:
            raise ValueError(
                f"an expectation is needed: {signature.signature} yields no built-in regression "
                "assertion, so say what the run must (not) do with --expect (e.g. "
                "'no side_effect email.send where to != ticket.email')"
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
        if request.resume is not None:
            # continued as new during the watch: the lifecycle is done but for the watch
            self._view = request.resume
            self._confirmation = request.resume.confirmation
            try:
                await self._watch(request)
                await self._enter(IncidentPhase.COMPLETED)
            except (ActivityError, ChildWorkflowError) as exc:
                self._update(error=str(exc.cause or exc))
                await self._enter(IncidentPhase.FAILED, str(exc.cause or exc))
            return self._view
        self._view = IncidentView(
            incident_id=request.incident_id,
            source_run_id=request.source_run_id,
            linked_incident_id=request.linked_incident_id,
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
        if request.retry_not_applied:
            await self._retry_not_applied()
        await self._sign(request)
        await self._enter(IncidentPhase.REPLAYING)
        await self._replays(request, [None])
        await self._enter(IncidentPhase.COUNTERFACTUALS)
        await self._replays(request, list(request.counterfactuals))
        if prompt_swap_fixes(self._current.replays) and workflow.patched("sign-with-replays"):
            await self._sign_with_replays(request)
        if request.fork_points:
            await self._fork_replays(request)
        await self._await_confirmation(request)
        await self._create_regression_case()
        await self._report()
        if request.watch_clean_runs:
            await self._watch(request)
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

    async def _retry_not_applied(self) -> None:
        """RECONCILING, when asked (``--retry-not-applied``): each side effect reconciled NOT
        applied is retried durably as a child ``SideEffectRetry`` (id = the side effect id),
        one after the other. A refused or failed retry is noted in the timeline, never fatal:
        the incident's evidence does not depend on it."""
        results = []
        for outcome in self._current.side_effects:
            if outcome.status != "RECONCILED" or outcome.applied is not False:
                continue
            se = outcome.side_effect_id
            try:
                result = await workflow.execute_child_workflow(
                    SideEffectRetryWorkflow.run, se, id=se, task_queue=CONTROL_QUEUE
                )
            except (ChildWorkflowError, WorkflowAlreadyStartedError) as exc:
                self._event(IncidentPhase.RECONCILING, f"{se} not retried: {exc.cause or exc}")
                continue
            results.append(result)
            self._event(IncidentPhase.RECONCILING, f"{se} retried: {result.status}")
        self._update(retries=tuple(results))
        await self._save()

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

    async def _sign_with_replays(self, request: IncidentRequest) -> None:
        """COUNTERFACTUALS: a prompt swap stopped the failure, so the signature is taken again
        with that fact (PROMPT where nothing else explains it; contributing otherwise)."""
        signature = await workflow.execute_activity_method(
            IncidentActivities.sign_failure_with_replays,
            args=[request.incident_id, request.source_run_id, True],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        before = self._current.signature
        self._update(signature=signature)
        if before is None or before.signature != signature.signature:
            workflow.upsert_search_attributes([FAILURE_SIGNATURE.value_set(signature.signature)])
            self._event(IncidentPhase.COUNTERFACTUALS, f"signature {signature.signature}")
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
            self._memo_verdicts(replays)
        await self._save()

    def _memo_verdicts(self, replays: list[IncidentReplay]) -> None:
        """The inconclusive count where Temporal shows the incident (describe, Web UI)."""
        workflow.upsert_memo(
            {"inconclusive": sum(r.inconclusive for r in replays), "replays": len(replays)}
        )

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

    async def _fork_replays(self, request: IncidentRequest) -> None:
        """COUNTERFACTUALS, when asked (``--fork-points K``): rank the run's candidate fork
        points from its evidence and the replays' first divergences, then fork-replay the top
        K with each counterfactual (or exactly, when there is none), N times each, as child
        ``Replay`` workflows. A fork that cannot run (no checkpoint) is reported, not fatal."""
        points: list[ForkPoint] = await workflow.execute_activity_method(
            IncidentActivities.rank_fork_points,
            args=[request.source_run_id, [r.first_divergent_step for r in self._current.replays]],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self._update(fork_points=tuple(points))
        cfs: list[Counterfactual | None] = list(request.counterfactuals) or [None]
        forks = [
            (i, point, j, cf)
            for i, point in enumerate(points[: request.fork_points])
            for j, cf in enumerate(cfs)
        ]
        # the forks draw from the incident's one budget like its other replays, and count in
        # its memo (issue 16)
        counted = workflow.patched("incident-fork-budget")
        allotments = self._allotments(request, len(forks)) if counted else None
        started = []
        for n, (i, point, j, cf) in enumerate(forks):
            plan = build_replay_plan(
                request.source_run_id,
                ReplayMode.FORK_FROM_STEP,
                replay_id=f"{request.incident_id}-fork{i + 1}-{'exact' if cf is None else f'cf{j + 1}'}",
                sampling_seed=1000 + 100 * i + j,
                from_step=point.fork_from,
                prompt=cf.value if cf and cf.kind == "prompt" else None,
                model=cf.value if cf and cf.kind == "model" else None,
                policy=cf.value if cf and cf.kind == "policy" else None,
                retriever=cf.value if cf and cf.kind == "retriever" else None,
                repeat=request.repeat,
                miss=request.miss_policy,
            )
            if allotments is not None:
                plan = plan.model_copy(update={"budget": allotments[n]})
            label = f"fork@{point.step_id} {cf.label if cf else 'exact'}"
            child = workflow.execute_child_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=plan),
                id=plan.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            started.append((point, label, plan.replay_id, child))
        outcomes = await asyncio.gather(*(c for *_, c in started), return_exceptions=True)
        replays, results = list(self._current.replays), []
        for (point, label, replay_id, _), outcome in zip(started, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                results.append(
                    ForkResult(
                        step_id=point.step_id, label=label, replay_id=replay_id, status="FAILED"
                    )
                )
                self._event(IncidentPhase.COUNTERFACTUALS, f"{label} failed: {outcome}")
                continue
            replay = _incident_replay(label, outcome)
            replays.append(replay)
            self._spent = self._spent.plus(
                outcome.budget_used.model_copy(update={"duration_seconds": 0.0})
            )
            results.append(
                ForkResult(
                    step_id=point.step_id,
                    label=label,
                    replay_id=replay.replay_id,
                    status=replay.status,
                    reproduced=replay.reproduced,
                    runs=replay.runs,
                    rate=replay.rate,
                )
            )
        self._update(replays=tuple(replays), fork_results=tuple(results))
        if counted:
            self._memo_verdicts(replays)
        await self._save()

    @workflow.signal(name="run_recorded")
    def run_recorded(self, run_id: Any = None) -> None:
        """A recorder or the ingestion says a run was recorded: the watch looks now instead of
        at its next timer. Carries nothing the watch relies on (it reads the store)."""
        self._poked = True

    async def _watch(self, request: IncidentRequest) -> None:
        """WATCHING (asked for with ``watch_clean_runs``): judge the graph's new runs that
        carry the fix version, every ``watch_interval_seconds`` or when signalled
        ``run_recorded``; done after that many clean runs with the fix or ``watch_days``;
        when the failure recurs on the fix, a new incident linked to this one is opened on the
        recurring run. Waits on a timer, never polls Temporal history, and continues as new
        every 100 looks so its history stays small."""
        if self._current.phase is not IncidentPhase.WATCHING:
            await self._enter(IncidentPhase.WATCHING)
        counts = self._current.watch or WatchCounts(started_at=workflow.now())
        assert counts.started_at is not None
        deadline = counts.started_at + timedelta(days=request.watch_days)
        for _ in range(100):
            counts = await workflow.execute_activity_method(
                IncidentActivities.watch_runs,
                args=[self._current, counts],
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=RETRY,
            )
            self._update(watch=counts)
            if counts.recurred_run_ids:
                await self._reopen(request, counts.recurred_run_ids[0])
                return
            clean = counts.runs_with_fix - counts.recurrences
            if clean >= request.watch_clean_runs or workflow.now() >= deadline:
                self._event(IncidentPhase.WATCHING, f"{clean} clean runs with the fix")
                return
            await self._save()
            self._poked = False
            try:
                await workflow.wait_condition(
                    lambda: self._poked,
                    timeout=timedelta(seconds=request.watch_interval_seconds),
                )
            except TimeoutError:
                pass
        workflow.continue_as_new(request.model_copy(update={"resume": self._current}))

    async def _reopen(self, request: IncidentRequest, run_id: str) -> None:
        """The failure recurred on the fix version: a new incident, linked to this one, on the
        run where it recurred (a child left running when this one completes)."""
        reopened = f"{request.incident_id}-recurrence"
        await workflow.start_child_workflow(
            IncidentWorkflow.run,
            IncidentRequest(
                incident_id=reopened,
                source_run_id=run_id,
                counterfactuals=request.counterfactuals,
                repeat=request.repeat,
                miss_policy=request.miss_policy,
                linked_incident_id=request.incident_id,
            ),
            id=reopened,
            task_queue=CONTROL_QUEUE,
            parent_close_policy=ParentClosePolicy.ABANDON,
        )
        watch = self._current.watch
        assert watch is not None
        self._update(watch=watch.model_copy(update={"reopened_incident_id": reopened}))
        self._event(IncidentPhase.WATCHING, f"recurred in {run_id}: reopened as {reopened}")

    # bookkeeping ----------------------------------------------------------------------------

    def _accept_signal(
        self, name: str, payload: Any, model: type[_Payload], validate: Callable[[_Payload], None]
    ) -> _Payload | None:
        """``payload`` as ``model`` if it passes ``validate``; otherwise None, and the refusal
        is kept in the view (a signal has no caller to answer, so the reason must stay)."""
        try:
            accepted = model.model_validate(payload)
            validate(accepted)
        except ValidationError as exc:
            reason = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
                for e in exc.errors()
            )
            self._reject(name, reason)
            return None
        except (ValueError, TypeError) as exc:
            self._reject(name, " ".join(str(exc).split()))
            return None
        return accepted

    def _reject(self, name: str, reason: str) -> None:
        rejected = RejectedSignal(name=name, reason=reason, at=workflow.now())
        if self._view is not None:
            self._update(rejected_signals=(*self._view.rejected_signals, rejected))
        workflow.logger.warning("signal %s rejected: %s", name, reason)

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
