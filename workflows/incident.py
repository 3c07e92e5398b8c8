"""IncidentWorkflow: FREEZING → RECONCILING → SIGNING → REPLAYING → COUNTERFACTUALS →
AWAITING_CONFIRMATION → CREATING_REGRESSION_CASE → REPORTING → COMPLETED (or FAILED).

The workflow waits durably (days, if need be) for people: a side effect whose outcome no
reconciler could establish waits for ``resolve_side_effect``; the root cause waits for
``confirm_root_cause``, an update validated to cite at least one replay of this incident.
Nothing here guesses a root cause (rule 18).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models.errors import InvalidInputError
    from models.expectations import parse_expectation
    from models.incident_flow import (
        IncidentPhase,
        IncidentRequest,
        IncidentView,
        ReconcileOutcome,
        RootCauseConfirmation,
        SideEffectResolution,
        prompt_swap_fixes,
    )
    from models.queues import CONTROL_QUEUE
    from models.watch import WatchCounts

from workflows._incident_closing import ClosingPhases
from workflows._incident_evidence import EvidencePhases
from workflows._incident_forks import ForkPhases
from workflows._incident_replays import ReplayPhases
from workflows._incident_state import INCIDENT_ID, RETRY, SOURCE_RUN_ID
from workflows.failure_cause import failure_cause

# the phases live in package-private modules (one per phase group, sharing
# ``_incident_state.IncidentState``); the workflow's name, handlers, activities, patch ids and
# the order of its commands are those of the single module it was split from, so saved
# histories replay (tests/workflows/test_determinism.py)


@workflow.defn(name="Incident")
class IncidentWorkflow(EvidencePhases, ReplayPhases, ForkPhases, ClosingPhases):
    # queries and updates ------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> IncidentView | None:
        """The incident as it stands: phase, timeline, side effects, replays and pending tasks
        (None before the run starts). Reads the workflow's own state only; changes nothing. A
        finished incident shows as such once the store has it."""
        return self._shown

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
                reason = self._failure_reason(exc)
                self._update(error=reason)
                await self._enter(IncidentPhase.FAILED, reason)
            return self._view
        self._view = IncidentView(
            incident_id=request.incident_id,
            source_run_id=request.source_run_id,
            linked_incident_id=request.linked_incident_id,
            substitute_model=request.substitute_model,
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
            reason = self._failure_reason(exc)
            self._update(error=reason)
            await self._enter(IncidentPhase.FAILED, reason)
            workflow.logger.warning("incident %s failed: %s", request.incident_id, reason)
        return self._view

    @staticmethod
    def _failure_reason(exc: ActivityError | ChildWorkflowError) -> str:
        """What failed, in one line: the worker's error (type and message) rather than the
        wrapper's "Activity task failed" (histories from before kept the wrapper's words)."""
        if workflow.patched("incident-failure-cause"):
            return failure_cause(exc)
        return str(exc.cause or exc)

    async def _lifecycle(self, request: IncidentRequest) -> None:
        await self._warm_for_replays(request)
        await self._freeze(request)
        await self._reconcile(request)
        if request.retry_not_applied:
            await self._retry_not_applied()
        await self._sign(request)
        pinned = [
            f"every replay calls {request.substitute_model} instead of the recorded model "
            "(substitute model, pinned in each replay's manifest)"
            if request.substitute_model
            else "",
            f"READ fixture misses answered in the sandbox by the tools module "
            f"{request.tools_module.label()} (pinned in each replay's manifest)"
            if request.tools_module is not None
            else "",
        ]
        await self._enter(IncidentPhase.REPLAYING, "; ".join(p for p in pinned if p))
        await self._replays(request, [None])
        await self._enter(IncidentPhase.COUNTERFACTUALS)
        # divergence first: the fork replays before (with ``fork_first`` instead of) the
        # whole-run counterfactuals; incidents started before ran them after (issue 30)
        forks_first = bool(request.fork_points) and workflow.patched("incident-forks-first")
        if forks_first:
            later = 0 if request.fork_first else len(request.counterfactuals)
            await self._fork_replays(request, reserve=later)
        if not (forks_first and request.fork_first):
            await self._replays(request, list(request.counterfactuals))
        if prompt_swap_fixes(self._current.replays) and workflow.patched("sign-with-replays"):
            await self._sign_with_replays(request)
        if request.fork_points and not forks_first:
            await self._fork_replays(request)
        await self._await_confirmation(request)
        await self._create_regression_case()
        await self._report()
        if request.watch_clean_runs:
            await self._watch(request)
        await self._enter(IncidentPhase.COMPLETED)

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
