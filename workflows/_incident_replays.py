"""SIGNING, REPLAYING and COUNTERFACTUALS of the ``Incident`` workflow: the failure's
signature, the exact replay and one replay per counterfactual as child ``Replay`` workflows
sharing the incident's budget, and the signature taken again when a prompt swap fixed it."""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models.incident_flow import Counterfactual, IncidentPhase, IncidentRequest
    from models.queues import CONTROL_QUEUE
    from models.replay_flow import ReplayOutcome, ReplayWorkflowInput
    from models.replay_plans import plan_for_candidates
    from workflows.replay import REPEAT_CONCURRENCY, ReplayWorkflow, warm_sandboxes

from workflows._incident_state import (
    FAILURE_SIGNATURE,
    RETRY,
    SHORT,
    IncidentState,
    incident_replay,
)


class ReplayPhases(IncidentState):
    """The signature and the replays without fork points (exact, then counterfactuals)."""

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

    async def _warm_for_replays(self, request: IncidentRequest) -> None:
        """Announce the incident's replays (exact and each counterfactual: their first
        ``REPEAT_CONCURRENCY`` children) to a replay worker before freezing, so that its warm
        sandbox pool has their processes started by the time their first batches come."""
        if request.repeat == 1:  # no repeat parents: the replays are the incident's children
            await warm_sandboxes(request.incident_id, 1 + len(request.counterfactuals))
            return
        at_once = min(request.repeat, REPEAT_CONCURRENCY)
        suffixes = ["exact"] + [f"cf{i + 1}" for i in range(len(request.counterfactuals))]
        for suffix in suffixes:
            await warm_sandboxes(f"{request.incident_id}-{suffix}", at_once)

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
                substitute_model=request.substitute_model,
                tools_module=request.tools_module,
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
            replays.append(incident_replay(label, outcome))
            self._spend(outcome)
        self._update(replays=tuple(replays))
        if workflow.patched("incident-verdict-memo"):
            self._memo_verdicts(replays)
        await self._save()
