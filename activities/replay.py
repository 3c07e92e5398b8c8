"""Replay activities: thin Temporal shells over ``runtime.replay.engine.ReplayEngine``."""

from __future__ import annotations

import asyncio

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import observe
from activities.heartbeat import heartbeating
from activities.sandbox.runner import SandboxedSteps
from models import ReplayMode, RunStatus
from models.comparison import compare_trajectories, reproduces
from models.errors import ReplaybookError, SandboxError
from models.replay_flow import ComparisonResult, PreparedReplay, ReplayPlan, StepInput, StepOutput
from runtime.ports import CounterfactualEvaluator
from runtime.replay.catalog import answers_one_at_a_time, replay_model
from runtime.replay.engine import ReplayEngine
from runtime.trajectory import load_trajectory, writes_executed

log = structlog.get_logger(__name__)
#: JSON bytes of a comparison's differences carried in ``compare_replay``'s result (and so in
#: the replay's outcome); the whole comparison is an artifact
CARRIED_DIFF_BYTES = 64 * 1024


#: how often a step activity heartbeats (its heartbeat timeout is 5 s)
STEP_HEARTBEAT_EVERY_SECONDS = 1.0


class ReplayActivities:
    """Activity methods; the engine (and through it every store) is injected by the worker."""

    def __init__(
        self,
        engine: ReplayEngine,
        sandboxed: SandboxedSteps | None = None,
        counterfactual: CounterfactualEvaluator | None = None,
    ) -> None:
        #: a benchmark's own verdict on a replayed conversation (imported tau-bench runs: would
        #: this model have passed the task?), injected by the worker
        self.counterfactual = counterfactual
        self.engine = engine
        #: runs the steps under bubblewrap; None only with the development flag (the engine
        #: then records the isolation ``none (dev flag)``)
        self.sandboxed = sandboxed

    @activity.defn(name="prepare_replay")
    async def prepare_replay(self, plan: ReplayPlan) -> PreparedReplay:
        """Verify the source run's chain and check that its evidence and the plan's overrides
        are available here; when nothing is missing, create the replay run (header and
        RUN_STARTED with the replay manifest; idempotent on retry). A refusal comes back as
        ``ok=False`` with its problems (and is counted), not as an error.

        Runs no step, calls no model or provider, and never writes to the source run; the
        result carries ids, hashes and counts only."""
        async with heartbeating(plan.replay_id):
            prepared = await self.engine.prepare(plan)
        log.info(
            "replay prepared",
            replay_id=plan.replay_id,
            source_run_id=plan.source_run_id,
            ok=prepared.ok,
            problems=list(prepared.problems),
        )
        if not prepared.ok:
            observe.replay_ended_early(
                plan.replay_id, plan.mode, "failed", "; ".join(prepared.problems)
            )
        return prepared

    @activity.defn(name="replay_step")
    async def replay_step(self, step: StepInput) -> StepOutput:
        """Run the replay's next steps from ``step`` (in the bubblewrap sandbox unless the
        development flag is set), each recorded whole or not at all in the replay run, and
        return where they ended with their counters and the isolation they ran under. A step
        already recorded by an earlier attempt is returned, not run again; heartbeats while it
        runs. Sandbox limits and violations are not retried.

        Never executes a write capability (each attempt is blocked, recorded as WRITE_BLOCKED
        and answered with the recorded result or a dry run), never writes to the source run,
        reaches a live model only in a mode other than RECORDED and live read providers only
        under the SANDBOX_LIVE miss policy; it passes ids, hashes and counters, never states or
        payloads."""
        # heartbeats let Temporal notice a dead worker within the heartbeat timeout instead of
        # waiting out the whole start-to-close timeout (a live model call can be slow)
        try:
            async with heartbeating(step.step_id, STEP_HEARTBEAT_EVERY_SECONDS):
                if self.sandboxed is None:
                    output = await self.engine.run_steps(step)
                    isolation = self.engine.isolation
                else:
                    output = await self.sandboxed.run_steps(step)
                    isolation = self.sandboxed.isolation
            # carried to the replay's outcome (status, API, reports): what the steps ran under
            return output.model_copy(update={"isolation": isolation})
        except SandboxError as exc:
            log.warning("sandboxed step failed", replay_id=step.plan.replay_id, error=str(exc))
            if exc.retryable:
                raise
            # a limit or a violation: running the same hostile code again cannot help
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
        except ReplaybookError as exc:
            if exc.retryable:
                raise
            # e.g. a model that answered no usable decision: the same seed answers the same
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc

    @activity.defn(name="compare_replay")
    async def compare_replay(self, plan: ReplayPlan) -> ComparisonResult:
        """Compare the replay's trajectory with the source's (a fork only with what it
        re-executed) and say whether it reproduces; the replay is counted in the metrics.

        Reads the ledger only: records nothing in either run and calls no model or provider."""
        after = 0
        async with heartbeating(plan.replay_id):
            if plan.from_step:  # a fork is compared on what it regenerated (the step on)
                source_run = await self.engine.source(plan.source_run_id)
                after = source_run.starts[plan.from_step].sequence
            source = await load_trajectory(
                self.engine.ledger, plan.source_run_id, after_sequence=after
            )
            replay = await load_trajectory(self.engine.ledger, plan.replay_id)
            # off the event loop: long runs' comparisons take seconds on a loaded machine, and
            # the heartbeats must go on meanwhile (issue 35 item 2)
            whole = await asyncio.to_thread(compare_trajectories, source, replay)
        # the whole comparison travels by reference: a long diverging run's differences would
        # pass Temporal's payload limit (TMPRL1103); the first ones are carried for the views
        ref = await self.engine.artifacts.put(whole.model_dump_json().encode())
        comparison = whole.carried(ref, CARRIED_DIFF_BYTES)
        result = ComparisonResult(
            comparison=comparison,
            reproduced=reproduces(comparison),
            # from the replay's own run as this worker reads it, never from the steps' word
            writes_executed=writes_executed(replay),
        )
        if self.counterfactual is not None and plan.mode is not ReplayMode.RECORDED:
            # e.g. an imported tau-bench run: would this model have passed the task?
            try:
                verdict = await self.counterfactual(plan.replay_id, plan.source_run_id)
            except ReplaybookError as exc:  # e.g. the databases are not where the setting says
                result = result.model_copy(update={"counterfactual_reason": str(exc)})
                verdict = None
            if verdict is not None:
                result = result.model_copy(
                    update={
                        "counterfactual_reward": verdict.counterfactual_reward,
                        "counterfactual_reason": verdict.reason,
                    }
                )
        # counted over every difference, not only the carried ones
        counted = result.model_copy(update={"comparison": whole})
        await observe.replay_compared(self.engine.ledger, plan, counted)
        return result

    @activity.defn(name="repeat_in_turn")
    async def repeat_in_turn(self, plan: ReplayPlan) -> bool:
        """Whether the ``--repeat`` children of ``plan`` run one after the other: the live
        model they call computes one request at a time (the embedded stack's local model
        server), so children running at once would only queue there, each call's wait counting
        against its timeout (and a call abandoned on its timeout still computed). False for a
        recorded replay, and when the model cannot be resolved (each child's preparation then
        reports why).

        Reads the source run's header only; calls no model, records nothing."""
        if plan.mode is ReplayMode.RECORDED:
            return False
        try:
            run = await self.engine.ledger.get_run(plan.source_run_id)
            catalog = self.engine.catalog(run.graph_id)
            name = replay_model(
                catalog,
                plan.mode,
                plan.model_name,
                plan.substitute_model,
                run.pinned.model_profile,
            )
            return answers_one_at_a_time(catalog.model(name))
        except ReplaybookError as exc:
            log.info("repeat children at once", replay_id=plan.replay_id, problem=str(exc))
            return False

    @activity.defn(name="expect_sandboxes")
    async def expect_sandboxes(self, key: str, count: int) -> int:
        """A fan-out is about to start ``count`` child replays whose ids start with ``key-``
        (an incident's replays, a ``--repeat`` parent's next children): this replay worker's
        warm sandbox pool grows to hold a started process for each (for the few that the
        repetitions of one plan share: ``activities.sandbox.siblings``), off their first
        batches' path, and the key is known as a fan-out whose repetitions share processes.
        Returns the pool's new size (0 with the development flag: no sandbox).

        Starts processes only (each as any other: same isolation, same limits); runs no step,
        reads and writes no store."""
        if self.sandboxed is None:
            return 0
        return self.sandboxed.expect(key, count)

    @activity.defn(name="close_replay_run")
    async def close_replay_run(self, replay_id: str, reason: str) -> None:
        """Mark the replay run ended early (canceled, failed, or stopped by its budget) in its
        header, close its kept sandboxed process on this worker, and count a cancellation or a
        failure. A run that does not exist yet (canceled while preparing) is not an error.

        Appends no event and deletes nothing; touches only the replay run, never its source."""
        if self.sandboxed is not None:  # its kept sandboxed process, when on this worker
            await self.sandboxed.close(replay_id)
        mode = "unknown"
        try:
            closed = await self.engine.ledger.finish_run(
                replay_id, RunStatus.FAILED, {"ended": reason}
            )
            mode = closed.labels.get("mode", mode)
        except Exception as exc:  # the run may not exist yet (canceled while preparing)
            log.info("no replay run to close", replay_id=replay_id, error=str(exc))
        if reason == "canceled":
            observe.replay_ended_early(replay_id, mode, "canceled", reason)
        elif reason.startswith("step "):  # a step failed for good (see the Replay workflow)
            observe.replay_ended_early(replay_id, mode, "failed", reason)
