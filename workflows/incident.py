"""IncidentWorkflow: FREEZING → RECONCILING → SIGNING → REPLAYING → COUNTERFACTUALS →
AWAITING_CONFIRMATION → CREATING_REGRESSION_CASE → REPORTING → COMPLETED (or FAILED).

The workflow waits durably (days, if need be) for people: a side effect whose outcome no
reconciler could establish waits for ``resolve_side_effect``; the root cause waits for
``confirm_root_cause``, an update validated to cite at least one replay of this incident.
Nothing here guesses a root cause (rule 18).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models import ReplayMode, ReplayStatus
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
    from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
    from workflows.replay import ReplayWorkflow

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

    # queries and updates ------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> IncidentView | None:
        return self._view

    @workflow.update(name="resolve_side_effect")
    async def resolve_side_effect(self, resolution: SideEffectResolution) -> ReconcileOutcome:
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
        self._confirmation = confirmation
        return "confirmed"

    @confirm_root_cause.validator
    def _validate_confirmation(self, confirmation: RootCauseConfirmation) -> None:
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

    # the lifecycle ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, request: IncidentRequest) -> IncidentView:
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
            retry_policy=RETRY,
        )
        self._update(freeze=freeze)

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
        pending = tuple(
            PendingTask(
                kind="resolve_side_effect",
                side_effect_id=o.side_effect_id,
                detail=f"{o.capability_id}: {o.reason} — replaybook incident resolve-side-effect "
                f"{request.incident_id} {o.side_effect_id} --outcome applied|not-applied --evidence TEXT",
            )
            for o in outcomes
            if o.needs_human
        )
        self._update(side_effects=tuple(outcomes), pending=pending)
        await self._save()
        await workflow.wait_condition(
            lambda: not any(p.kind == "resolve_side_effect" for p in self._view.pending)
        )

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

        await self._enter(IncidentPhase.REPLAYING)
        await self._replays(request, [None])
        await self._enter(IncidentPhase.COUNTERFACTUALS)
        await self._replays(request, list(request.counterfactuals))

        await self._enter(IncidentPhase.AWAITING_CONFIRMATION)
        self._update(
            pending=(
                *self._view.pending,
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
            pending=tuple(p for p in self._view.pending if p.kind != "confirm_root_cause"),
        )
        self._event(
            IncidentPhase.AWAITING_CONFIRMATION, f"confirmed by {self._confirmation.verified_by}"
        )

        await self._enter(IncidentPhase.CREATING_REGRESSION_CASE)
        case_id = await workflow.execute_activity_method(
            IncidentActivities.create_regression_case,
            args=[self._view, self._confirmation],
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
        self._update(regression_case_id=case_id)

        await self._enter(IncidentPhase.REPORTING)
        refs = await workflow.execute_activity_method(
            IncidentActivities.build_incident_report,
            self._view,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=RETRY,
        )
        self._update(report_refs=refs)
        await self._enter(IncidentPhase.COMPLETED)

    async def _replays(
        self, request: IncidentRequest, counterfactuals: list[Counterfactual | None]
    ) -> None:
        handles = []
        for index, cf in enumerate(counterfactuals):
            suffix = "exact" if cf is None else f"cf{index + 1}"
            plan = ReplayPlan(
                replay_id=f"{request.incident_id}-{suffix}",
                source_run_id=request.source_run_id,
                mode=ReplayMode.EXACT if cf is None else cf.mode,
                prompt_version=cf.value if cf and cf.kind == "prompt" else None,
                model_name=cf.value if cf and cf.kind == "model" else None,
                policy_version=cf.value if cf and cf.kind == "policy" else None,
                retriever_version=cf.value if cf and cf.kind == "retriever" else None,
                miss_policy=request.miss_policy,
                repeat=request.repeat,
                sampling_seed=index + 1,
            )
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
        replays = list(self._view.replays)
        for (label, _), outcome in zip(handles, outcomes, strict=True):
            summary = outcome.summary or {}
            comparison = outcome.comparison
            ci = summary.get("ci95")
            replays.append(
                IncidentReplay(
                    replay_id=outcome.replay_id,
                    label=label,
                    mode=outcome.mode,
                    status=outcome.status.value,
                    confidence=outcome.confidence,
                    reproduced=summary.get(
                        "reproduced",
                        1 if outcome.reproduced else 0 if outcome.reproduced is not None else None,
                    ),
                    runs=summary.get(
                        "runs", 1 if outcome.status is ReplayStatus.COMPLETED else None
                    ),
                    rate=summary.get("rate"),
                    ci95=(ci[0], ci[1]) if isinstance(ci, list | tuple) else None,
                    critical=bool(comparison and comparison.critical),
                    first_divergent_step=comparison.first_divergent_step if comparison else None,
                )
            )
        self._update(replays=tuple(replays))
        await self._save()

    # bookkeeping ----------------------------------------------------------------------------

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
            self._view,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )
