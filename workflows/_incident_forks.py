"""COUNTERFACTUALS at fork points of the ``Incident`` workflow (``--fork-points K``): the
run's candidate fork points ranked, and the top K fork-replayed as child ``Replay`` workflows
drawing from the incident's one budget."""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models.enums import ReplayMode
    from models.fork_points import ForkPoint, ForkResult
    from models.incident_flow import Counterfactual, IncidentPhase, IncidentRequest
    from models.queues import CONTROL_QUEUE
    from models.replay_flow import ReplayWorkflowInput
    from models.replay_plans import build_replay_plan
    from workflows.replay import ReplayWorkflow

from workflows._incident_state import RETRY, SHORT, IncidentState, incident_replay


class ForkPhases(IncidentState):
    """The fork-point replays, before the whole-run counterfactuals (or instead of them)."""

    async def _fork_replays(self, request: IncidentRequest, reserve: int = 0) -> None:
        """COUNTERFACTUALS, when asked (``--fork-points K``): rank the run's fork points (its
        first step included) and fork-replay the top K with each counterfactual (or exactly),
        N times each, as child ``Replay`` workflows regenerating from the point; one that
        cannot run is reported, not fatal. ``reserve``: replays still to come on the budget."""
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
        allotments = self._allotments(request, len(forks) + reserve) if counted else None
        started = []
        for n, (i, point, j, cf) in enumerate(forks):
            plan = build_replay_plan(
                request.source_run_id,
                ReplayMode.FORK_FROM_STEP,
                replay_id=f"{request.incident_id}-fork{i + 1}-{'exact' if cf is None else f'cf{j + 1}'}",
                sampling_seed=1000 + 100 * i + j,
                # the point itself is the first step regenerated (its decision taken again)
                from_step=point.step_id,
                # the counterfactual's swap: its kind is the plan's parameter of that name
                **({cf.kind: cf.value} if cf else {}),  # type: ignore[arg-type]
                repeat=request.repeat,
                miss=request.miss_policy,
                substitute_model=request.substitute_model,
                tools_module=request.tools_module,
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
            replay = incident_replay(label, outcome)
            replays.append(replay)
            self._spend(outcome)
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
