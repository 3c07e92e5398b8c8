"""FREEZING and RECONCILING of the ``Incident`` workflow: the run's evidence frozen, side
effects of unknown outcome reconciled (a person's verdict where no reconciler could tell), and,
when asked, those proved not applied retried as child ``SideEffectRetry`` workflows."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models.incident_flow import (
        IncidentPhase,
        IncidentRequest,
        PendingTask,
        ReconcileOutcome,
        SideEffectResolution,
    )
    from models.queues import CONTROL_QUEUE
    from workflows.replay import HEARTBEAT
    from workflows.side_effect_retry import SideEffectRetryWorkflow

from workflows._incident_state import RETRY, SHORT, IncidentState


class EvidencePhases(IncidentState):
    """The first phases, and applying a person's verdict on a side effect (the
    ``resolve_side_effect`` handlers of ``IncidentWorkflow`` call ``_apply_resolution``)."""

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
