"""AWAITING_CONFIRMATION, CREATING_REGRESSION_CASE and REPORTING of the ``Incident``
workflow: a person's root cause waited for (never guessed, rule 18), then the regression case
and the report."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.incident import IncidentActivities
    from models.incident_flow import IncidentPhase, IncidentRequest, PendingTask
    from workflows.replay import HEARTBEAT

from workflows._incident_state import RETRY, SHORT, IncidentState


class ClosingPhases(IncidentState):
    """The phases after the replays, up to the watch (kept in ``workflows.incident``, which
    can start a linked incident)."""

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
