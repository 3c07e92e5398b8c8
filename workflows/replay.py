"""ReplayWorkflow: CREATED → PREPARING → RUNNING → COMPARING → COMPLETED | FAILED | CANCELED.

Deterministic: no I/O, no clock but ``workflow.now()``, ids and hashes only in history (states,
prompts and payloads stay in the stores). Steps run as activities on the replay task queue;
long replays continue as new. With ``repeat > 1`` the workflow runs that many child replays and
reports the reproduction rate with a 95% Wilson interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
)

with workflow.unsafe.imports_passed_through():
    from activities.replay import ReplayActivities
    from models import ReplayConfidence, ReplayStatus
    from models.budget import (
        BudgetUsage,
        exhausted,
        fitting,
        limited,
        peak,
        remaining,
        shares,
        spent,
    )
    from models.completeness import completeness_text
    from models.enums import DiffType
    from models.queues import CONTROL_QUEUE, HEARTBEAT_TIMEOUT_SECONDS, REPLAY_QUEUE
    from models.replay import ReplayBudget, ReplayComparison, TrajectoryDiff
    from models.replay_flow import (
        ChildResult,
        PreparedReplay,
        ReplayOutcome,
        ReplayPlan,
        ReplayProgress,
        ReplayWorkflowInput,
        ResumePoint,
        StepInput,
        StepOutput,
        merge_isolation,
    )
    from models.verdicts import (
        Verdict,
        failure_verdict,
        outcome_verdict,
        stop_verdict,
        verdict_summary,
    )

REPLAY_STATUS = SearchAttributeKey.for_keyword("ReplayStatus")
SOURCE_RUN_ID = SearchAttributeKey.for_keyword("SourceRunId")
REPLAY_MODE = SearchAttributeKey.for_keyword("ReplayMode")

#: a long activity whose worker stopped heartbeating this long is retried elsewhere
HEARTBEAT = timedelta(seconds=HEARTBEAT_TIMEOUT_SECONDS)
#: a step activity whose worker stopped heartbeating this long is retried elsewhere
STEP_HEARTBEAT_SECONDS = 5
#: how long one step activity may run (a live model call included: the registry's timeout,
#: ``REPLAYBOOK_MODELS_TIMEOUT``, is at most ``MAX_REGISTRY_TIMEOUT``, below this)
STEP_TIMEOUT = timedelta(minutes=15)
#: child replays running at once for --repeat
REPEAT_CONCURRENCY = 10
#: the patch under which a fan-out announces its children to the replay workers' sandbox pools
WARM_SANDBOXES = "fanout-warm-sandboxes"
#: a cancel that arrives during the fan-out hint cancels the parent (see ``warm_sandboxes``)
CANCEL_THROUGH_HINT = "fanout-hint-passes-cancel"
#: errors that retrying cannot fix
NON_RETRYABLE = [
    "InvalidInputError",
    "ConfigurationError",
    "ChainBrokenError",
    "GraphNotFoundError",
    "UnknownCapabilityError",
    "StateMigrationError",
    "ReplaybookError",
]
RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=NON_RETRYABLE)


@workflow.defn(name="Replay")
class ReplayWorkflow:
    def __init__(self) -> None:
        self._progress = ReplayProgress(status=ReplayStatus.CREATED)

    @workflow.query(name="status")
    def status(self) -> ReplayProgress:
        """The replay's progress: status, confidence, completeness and step counts. Reads the
        workflow's own state only; changes nothing and runs no activity."""
        return self._progress

    def _set(self, status: ReplayStatus, **changes: object) -> None:
        self._progress = self._progress.model_copy(update={"status": status, **changes})
        workflow.upsert_search_attributes([REPLAY_STATUS.value_set(status.value)])
        # Temporal shows a replay that Replaybook judged FAILED as a COMPLETED workflow (its
        # result is the outcome parents and the API read): the Web UI's list shows this
        # ReplayStatus search attribute (a column or ReplayStatus="FAILED"), the workflow's
        # page these current details (no command: saved histories replay unchanged)
        reason = self._progress.reason
        workflow.set_current_details(
            f"Replaybook: {status.value}" + (f": {reason}" if reason else "")
        )

    @workflow.run
    async def run(self, inp: ReplayWorkflowInput) -> ReplayOutcome:
        """Replay one recorded run: prepare it, run its steps as activities on the replay queue
        (continuing as new on long replays, stopping on the budget), compare the replay with its
        source; with ``repeat > 1`` run that many child replays and report the reproduction
        rate instead. A cancellation closes the replay's run and is re-raised.

        Deterministic: it does no I/O and reads no clock but ``workflow.now()``; it executes no
        capability itself (the steps run in activities, which block every write);
        its history carries ids, hashes, counters and the comparison's verdict, never states,
        prompts or payloads (those stay in the stores).
        """
        plan = inp.plan
        workflow.upsert_search_attributes(
            [SOURCE_RUN_ID.value_set(plan.source_run_id), REPLAY_MODE.value_set(plan.mode.value)]
        )
        try:
            if plan.repeat > 1:
                return await self._repeat(plan)
            return await self._single(inp)
        except asyncio.CancelledError:
            self._set(ReplayStatus.CANCELED)
            await workflow.execute_activity_method(
                ReplayActivities.close_replay_run,
                args=[plan.replay_id, "canceled"],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RETRY,
            )
            workflow.logger.info("replay %s canceled", plan.replay_id)
            raise

    async def _single(self, inp: ReplayWorkflowInput) -> ReplayOutcome:
        plan = inp.plan
        resume = inp.resume
        if resume is None:
            started = await self._prepare(plan)
            if isinstance(started, ReplayOutcome):
                return started
            resume = started
        prepared = resume.prepared
        self._set(
            ReplayStatus.RUNNING,
            confidence=prepared.confidence,
            completeness=f"{prepared.completeness_score}/{prepared.completeness_total}",
        )
        stepped = await self._run_steps(plan, resume)
        if isinstance(stepped, ReplayOutcome):
            return stepped
        resume, stopped = stepped
        return await self._compare(plan, resume, stopped)

    async def _prepare(self, plan: ReplayPlan) -> ResumePoint | ReplayOutcome:
        """The point the first step starts from, or the FAILED outcome when preparing refused."""
        self._set(ReplayStatus.PREPARING)
        prepared: PreparedReplay = await workflow.execute_activity_method(
            ReplayActivities.prepare_replay,
            plan,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
        if not prepared.ok:
            reason = "; ".join(prepared.problems)
            self._set(ReplayStatus.FAILED, reason=reason)
            verdict = failure_verdict(None, reason, preparing=True)
            self._memo_verdicts([verdict])
            return self._outcome(
                plan, ReplayStatus.FAILED, prepared, reason=reason, verdict=verdict
            )
        return ResumePoint(
            prepared=prepared,
            step_id=prepared.start_step,
            state_ref=prepared.state_ref,
            cursors=prepared.cursors,
            head=prepared.head,
            started_at=workflow.now(),
        )

    async def _run_steps(
        self, plan: ReplayPlan, resume: ResumePoint
    ) -> tuple[ResumePoint, str | None] | ReplayOutcome:
        """Run steps until the graph ends, a step stops the replay or the budget runs out
        (continuing as new every ``steps_per_run`` steps or ``activities_per_run`` step
        activities, whichever comes first). Returns where the steps ended and why
        they stopped early (None: the graph finished), or the FAILED outcome of a step that
        failed for good."""
        stopped: str | None = None
        steps_this_run = activities_this_run = 0
        while resume.step_id is not None and stopped is None:
            elapsed = (workflow.now() - resume.started_at).total_seconds()
            used = resume.usage.model_copy(update={"duration_seconds": elapsed})
            checked = plan.budget
            if workflow.patched("budget-at-the-call"):
                # calls, tokens and cost are refused at the model call itself, before it is
                # made (a step that calls no model needs none); time is checked here
                checked = ReplayBudget(max_duration=plan.budget.max_duration)
            reason = exhausted(checked, used)
            if reason is not None:
                stopped = f"budget: {reason}"
                break
            if steps_this_run >= plan.steps_per_run or (
                activities_this_run >= plan.activities_per_run
                and workflow.patched("continue-as-new-by-activities")
            ):
                workflow.continue_as_new(ReplayWorkflowInput(plan=plan, resume=resume))
            try:
                out = await self._step(plan, resume)
            except ActivityError as exc:
                return await self._step_failed(plan, resume, exc)
            steps_this_run += out.steps
            activities_this_run += 1
            resume = _advanced(resume, out)
            self._progress = self._progress.model_copy(
                update={
                    "steps_executed": resume.steps_executed,
                    "writes_blocked": resume.writes_blocked,
                }
            )
            stopped = out.stopped
        return resume, stopped

    async def _step(self, plan: ReplayPlan, resume: ResumePoint) -> StepOutput:
        """The output of the steps from ``resume``, run as one activity on the replay queue."""
        return await workflow.execute_activity_method(
            ReplayActivities.replay_step,
            StepInput(
                plan=plan,
                step_id=resume.step_id,
                state_ref=resume.state_ref,
                cursors=resume.cursors,
                head=resume.head,
                usage=resume.usage,
                step_index=resume.steps_executed,
                written_bytes=resume.written_bytes,
                # the time limit holds inside a step too: the worker stops a step past it
                deadline=resume.started_at + plan.budget.max_duration
                if plan.budget.max_duration is not None
                else None,
            ),
            task_queue=REPLAY_QUEUE,
            start_to_close_timeout=STEP_TIMEOUT,
            heartbeat_timeout=timedelta(seconds=STEP_HEARTBEAT_SECONDS),
            retry_policy=RETRY,
        )

    async def _step_failed(
        self, plan: ReplayPlan, resume: ResumePoint, exc: ActivityError
    ) -> ReplayOutcome:
        """The FAILED outcome of a step that failed for good, its run closed; a step canceled
        with the replay re-raises the cancellation instead."""
        if isinstance(exc.cause, CancelledError):
            # the replay was canceled while this step ran
            raise asyncio.CancelledError() from exc
        reason = f"step {resume.step_id} failed: {exc.cause or exc}"
        self._set(ReplayStatus.FAILED, reason=reason)
        error_type = exc.cause.type if isinstance(exc.cause, ApplicationError) else None
        verdict = failure_verdict(error_type, reason)
        self._memo_verdicts([verdict])
        if workflow.patched("close-failed-replay-run"):
            # the replay's run is marked FAILED and the failure counted (metrics)
            with contextlib.suppress(ActivityError):
                await workflow.execute_activity_method(
                    ReplayActivities.close_replay_run,
                    args=[plan.replay_id, reason],
                    start_to_close_timeout=timedelta(seconds=30),
                    retry_policy=RETRY,
                )
        return self._outcome(
            plan,
            ReplayStatus.FAILED,
            resume.prepared,
            resume=resume,
            reason=reason,
            verdict=verdict,
        )

    async def _compare(
        self, plan: ReplayPlan, resume: ResumePoint, stopped: str | None
    ) -> ReplayOutcome:
        """The COMPLETED outcome: the replay compared with its source (a replay stopped by its
        budget has its run closed first)."""
        if stopped is not None and stopped.startswith("budget"):
            await workflow.execute_activity_method(
                ReplayActivities.close_replay_run,
                args=[plan.replay_id, stopped],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RETRY,
            )
        self._set(ReplayStatus.COMPARING)
        result = await workflow.execute_activity_method(
            ReplayActivities.compare_replay,
            plan,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT,
            retry_policy=RETRY,
        )
        self._set(ReplayStatus.COMPLETED)
        # a replay that stopped before its end showed nothing either way (issue 16)
        verdict = stop_verdict(stopped, result.reproduced)
        self._memo_verdicts([verdict])
        outcome = self._outcome(
            plan,
            ReplayStatus.COMPLETED,
            resume.prepared,
            resume=resume,
            reason=stopped,
            verdict=verdict,
        )
        comparison = _with_drift(result.comparison, resume.prepared)
        drifted = any(d.type is DiffType.PROMPT_DRIFT for d in comparison.diffs)
        outcome = outcome.model_copy(
            update={
                "comparison": comparison,
                "reproduced": result.reproduced if verdict.conclusive else None,
                "partial": stopped is not None,
                # a prompt today's code compiles otherwise: not the recording's world (LIMITED)
                "confidence": ReplayConfidence.LIMITED if drifted else outcome.confidence,
                # counted by the worker from the replay's own run (what reached a provider)
                "writes_executed": result.writes_executed,
                # an inconclusive replay (stopped before its end) is no benchmark result:
                # never scored, so never counted in ``counterfactual_scored``
                "counterfactual_reward": result.counterfactual_reward
                if verdict.conclusive
                else None,
                "counterfactual_reason": result.counterfactual_reason,
            }
        )
        workflow.logger.info(
            "replay %s completed: reproduced=%s writes_blocked=%s",
            plan.replay_id,
            result.reproduced,
            resume.writes_blocked,
        )
        return outcome

    def _outcome(
        self,
        plan: ReplayPlan,
        status: ReplayStatus,
        prepared: PreparedReplay,
        *,
        resume: ResumePoint | None = None,
        reason: str | None = None,
        verdict: Verdict | None = None,
    ) -> ReplayOutcome:
        conclusive = verdict is None or verdict.conclusive
        return ReplayOutcome(
            replay_id=plan.replay_id,
            source_run_id=plan.source_run_id,
            mode=plan.mode,
            status=status,
            # an inconclusive replay establishes nothing at full confidence
            confidence=prepared.confidence if conclusive else ReplayConfidence.LIMITED,
            completeness=completeness_text(
                prepared.completeness_score,
                prepared.completeness_total,
                prepared.missing_evidence,
            ),
            writes_blocked=resume.writes_blocked if resume else 0,
            fixture_misses=resume.fixture_misses if resume else 0,
            steps_executed=resume.steps_executed if resume else 0,
            # the real time the replay took, not a counter nothing sets
            budget_used=(
                resume.usage.model_copy(
                    update={
                        "duration_seconds": (workflow.now() - resume.started_at).total_seconds()
                    }
                )
                if resume
                else BudgetUsage()
            ),
            reason=reason,
            simulation=plan.simulation,
            isolation=resume.isolation if resume else None,
            verdict=verdict.verdict if verdict else None,
            inconclusive_reason=verdict.inconclusive_reason if verdict else None,
            verdict_reason=verdict.reason if verdict else None,
            manifest=prepared.manifest,
        )

    def _memo_verdicts(self, verdicts: list[Verdict]) -> None:
        """The verdict counts in the workflow's memo (visible in ``temporal workflow describe``
        and the Web UI), so an inconclusive replay is never read as "not reproduced"."""
        if workflow.patched("replay-verdict-memo"):
            summary = verdict_summary(verdicts)
            workflow.upsert_memo(
                {
                    key: summary[key]
                    for key in ("reproduced", "not_reproduced", "inconclusive", "runs")
                }
            )

    async def _repeat(self, plan: ReplayPlan) -> ReplayOutcome:
        self._set(ReplayStatus.RUNNING)
        children = [
            plan.model_copy(
                update={
                    "replay_id": f"{plan.replay_id}-{i:03d}",
                    "repeat": 1,
                    "sampling_seed": plan.sampling_seed * 1000 + i,
                }
            )
            for i in range(plan.repeat)
        ]
        started_at = workflow.now()
        at_once = await self._children_at_once(plan)
        budget = plan.budget
        if workflow.patched("repeat-shared-budget") and (
            limited(budget) or budget.max_duration is not None
        ):
            # one budget for the whole request: each child draws an allotment of what is left
            outcomes = await self._children_within_budget(plan, children, started_at, at_once)
        else:
            outcomes = []
            for start in range(0, len(children), at_once):
                # this batch and the next announced: the next one's processes start meanwhile
                ahead = len(children[start : start + 2 * at_once])
                await warm_sandboxes(plan.replay_id, ahead)
                outcomes += await self._children(children[start : start + at_once])
        return self._summarized(plan, outcomes, started_at)

    async def _children_at_once(self, plan: ReplayPlan) -> int:
        """How many children run at once: ``REPEAT_CONCURRENCY``, or 1 when the live model
        they call computes one request at a time (the embedded stack's local model server),
        where children at once would only queue, each call's wait counting against its
        timeout (the worker says which, ``repeat_in_turn``)."""
        if not workflow.patched("repeat-in-turn-on-one-at-a-time-model"):
            return REPEAT_CONCURRENCY
        in_turn = await workflow.execute_activity_method(
            ReplayActivities.repeat_in_turn,
            plan,
            start_to_close_timeout=timedelta(minutes=1),
            retry_policy=RETRY,
        )
        return 1 if in_turn else REPEAT_CONCURRENCY

    async def _children(self, batch: list[ReplayPlan]) -> list[ReplayOutcome]:
        """Run ``batch`` as child replays at once; a child failing for good fails the parent."""
        handles = [
            workflow.execute_child_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=child),
                id=child.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            for child in batch
        ]
        try:
            outcomes: list[ReplayOutcome] = list(await asyncio.gather(*handles))
        except ChildWorkflowError as exc:
            self._set(ReplayStatus.FAILED, reason=str(exc))
            raise
        done = self._progress.steps_executed + len(outcomes)
        self._progress = self._progress.model_copy(update={"steps_executed": done})
        return outcomes

    async def _children_within_budget(
        self,
        plan: ReplayPlan,
        children: list[ReplayPlan],
        started_at: datetime,
        at_once: int = REPEAT_CONCURRENCY,
    ) -> list[ReplayOutcome]:
        """Run the children so that together they stay within the request's one budget.

        Deterministic: the allotments are computed here from the children's reported usage,
        never from shared mutable state. The first child runs alone with everything left (what
        one child needs is not known yet); then as many children as the rest fits, at most
        ``at_once``, each with an equal share (the sum never exceeds what is left).
        Children left when the budget is spent are not started: INCONCLUSIVE, reason BUDGET."""
        outcomes: list[ReplayOutcome] = []
        pending = list(children)
        while pending:
            elapsed = (workflow.now() - started_at).total_seconds()
            used = _total_usage(outcomes).model_copy(update={"duration_seconds": elapsed})
            left = remaining(plan.budget, used)
            if spent(left):
                outcomes += [_not_started(child, plan.budget, used) for child in pending]
                break
            size = at_once
            if limited(plan.budget):
                fits = fitting(left, peak([o.budget_used for o in outcomes])) if outcomes else 1
                size = at_once if fits is None else max(fits, 1)
            size = min(size, len(pending), at_once)
            batch = [
                child.model_copy(update={"budget": share})
                for child, share in zip(pending[:size], shares(left, size), strict=True)
            ]
            pending = pending[size:]
            await warm_sandboxes(plan.replay_id, size + min(len(pending), at_once))
            outcomes += await self._children(batch)
        return outcomes

    def _summarized(
        self, plan: ReplayPlan, outcomes: list[ReplayOutcome], started_at: datetime
    ) -> ReplayOutcome:
        """The parent's outcome: the children's verdicts counted (rate and interval over the
        conclusive ones), their use of the one budget summed."""
        self._set(ReplayStatus.COMPARING)
        verdicts = [outcome_verdict(o) for o in outcomes]
        summary = verdict_summary(verdicts)
        # imported tau-bench runs: how many conclusive children would have passed the task
        # (an inconclusive child's reward is None: Replaybook cut it short, nothing to score)
        rewards = [o.counterfactual_reward for o in outcomes if o.counterfactual_reward is not None]
        judged = [o for o in outcomes if o.counterfactual_reason is not None]
        if rewards or judged:
            summary = {
                **summary,
                "counterfactual_passed": sum(rewards),
                "counterfactual_scored": len(rewards),
                "counterfactual_unscored": len(judged) - len(rewards),
            }
        self._memo_verdicts(verdicts)
        ran = [o for o in outcomes if o.status is ReplayStatus.COMPLETED]
        conclusive = [o for o, v in zip(outcomes, verdicts, strict=True) if v.conclusive]
        self._set(ReplayStatus.COMPLETED)
        first = (conclusive or ran or outcomes)[0]
        confidence = (
            ReplayConfidence.FULL
            if all(o.confidence is ReplayConfidence.FULL for o in outcomes)
            and summary["inconclusive"] == 0
            else ReplayConfidence.LIMITED
        )
        return ReplayOutcome(
            replay_id=plan.replay_id,
            source_run_id=plan.source_run_id,
            mode=plan.mode,
            status=ReplayStatus.COMPLETED if ran else ReplayStatus.FAILED,
            confidence=confidence,
            completeness=first.completeness,
            comparison=first.comparison,
            reproduced=None,
            writes_blocked=sum(o.writes_blocked for o in outcomes),
            writes_executed=sum(o.writes_executed for o in outcomes),
            fixture_misses=sum(o.fixture_misses for o in outcomes),
            steps_executed=sum(o.steps_executed for o in outcomes),
            # the children's spend, and the real time the whole request took
            budget_used=_total_usage(outcomes).model_copy(
                update={"duration_seconds": (workflow.now() - started_at).total_seconds()}
            ),
            partial=any(o.partial for o in outcomes),
            simulation=plan.simulation,
            children=tuple(o.replay_id for o in outcomes),
            summary=summary,
            manifest=next((o.manifest for o in outcomes if o.manifest), None),
            isolation=functools.reduce(merge_isolation, (o.isolation for o in outcomes), None),
            child_results=tuple(
                ChildResult(
                    replay_id=o.replay_id,
                    status=o.status,
                    verdict=v.verdict,
                    inconclusive_reason=v.inconclusive_reason,
                    verdict_reason=v.reason,
                    reproduced=o.reproduced,
                    budget_used=o.budget_used,
                    counterfactual_reward=o.counterfactual_reward,
                    counterfactual_reason=o.counterfactual_reason,
                )
                for o, v in zip(outcomes, verdicts, strict=True)
            ),
        )


async def warm_sandboxes(key: str, count: int) -> None:
    """Tell a replay worker that ``count`` child replays whose ids start with ``key-`` are
    about to run, so that its warm sandbox pool holds a started process for each before their
    first batch (``expect_sandboxes``). A hint: a worker that does not answer within seconds
    (none running, an older one) changes nothing, the children start their processes as
    before. Behind the ``fanout-warm-sandboxes`` patch (histories from before have no such
    activity)."""
    if count <= 0 or not workflow.patched(WARM_SANDBOXES):
        return
    try:
        await workflow.execute_activity_method(
            ReplayActivities.expect_sandboxes,
            args=[key, count],
            task_queue=REPLAY_QUEUE,
            schedule_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
    except ActivityError as exc:
        # the hint's failure changes nothing, but a cancel of the parent that arrived while it
        # ran is the parent's: swallowed, the parent went on and started all its children (a
        # --repeat 200 cancelled at once ended COMPLETED). Patched: a history from before
        # went on there
        if isinstance(exc.cause, CancelledError) and workflow.patched(CANCEL_THROUGH_HINT):
            raise asyncio.CancelledError() from exc


def _with_drift(comparison: ReplayComparison, prepared: PreparedReplay) -> ReplayComparison:
    """The comparison with an ENVIRONMENT_DRIFT difference naming the changed manifest keys,
    when the replay worker's environment or source differs from the recording's."""
    if not prepared.environment_drift:
        return comparison
    drift = TrajectoryDiff(
        type=DiffType.ENVIRONMENT_DRIFT,
        explanation="the replay worker differs from the recording in "
        + ", ".join(prepared.environment_drift),
    )
    return comparison.model_copy(update={"diffs": (*comparison.diffs, drift)})


def _not_started(child: ReplayPlan, budget: ReplayBudget, used: BudgetUsage) -> ReplayOutcome:
    """A child the request's budget left no room for: never started, INCONCLUSIVE (BUDGET)."""
    reason = f"budget: {exhausted(budget, used) or 'spent'} before this child started"
    verdict = stop_verdict(reason, False)
    return ReplayOutcome(
        replay_id=child.replay_id,
        source_run_id=child.source_run_id,
        mode=child.mode,
        status=ReplayStatus.CANCELED,
        reason=reason,
        simulation=child.simulation,
        verdict=verdict.verdict,
        inconclusive_reason=verdict.inconclusive_reason,
        verdict_reason=verdict.reason,
    )


def _advanced(resume: ResumePoint, out: StepOutput) -> ResumePoint:
    """The resume point after ``out``: where the next step starts and the totals so far."""
    return resume.model_copy(
        update={
            "step_id": None if out.finished else out.next_step,
            "state_ref": out.state_ref,
            "cursors": out.cursors,
            "head": out.head,
            "usage": resume.usage.plus(out.usage),
            "writes_blocked": resume.writes_blocked + out.writes_blocked,
            "fixture_misses": resume.fixture_misses + out.fixture_misses,
            "steps_executed": resume.steps_executed + out.steps,
            "isolation": merge_isolation(resume.isolation, out.isolation),
            # a total counted by the worker's broker (an unsandboxed step reports 0)
            "written_bytes": max(resume.written_bytes, out.written_bytes),
        }
    )


def _total_usage(outcomes: list[ReplayOutcome]) -> BudgetUsage:
    total = BudgetUsage()
    for outcome in outcomes:
        total = total.plus(outcome.budget_used)
    return total
