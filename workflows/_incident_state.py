"""The ``Incident`` workflow's state and the bookkeeping every phase shares: the view and its
timeline, phase changes, saving, refused signals, the inconclusive memo and the incident's
one replay budget. Package-private: ``workflows.incident`` assembles the workflow from this
and the phase modules (``_incident_evidence``, ``_incident_replays``, ``_incident_forks``,
``_incident_closing``); none of it issues a command of its own beyond what the moved code did.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.incident import IncidentActivities
    from models import ReplayConfidence
    from models.base import Record
    from models.budget import BudgetUsage, remaining, shares
    from models.incident_flow import (
        IncidentPhase,
        IncidentReplay,
        IncidentRequest,
        IncidentView,
        RejectedSignal,
        RootCauseConfirmation,
        TimelineEntry,
    )
    from models.replay import ReplayBudget
    from models.replay_flow import ReplayOutcome
    from models.verdicts import outcome_summary

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


class IncidentState:
    """What the workflow keeps between its phases, and the helpers that change it."""

    def __init__(self) -> None:
        self._view: IncidentView | None = None
        #: while a finished incident's view is being saved, what the status query shows: the
        #: view before it. A reader who sees COMPLETED then finds it in the store (its report
        #: with it); the query had shown COMPLETED before the save, and a report read at once
        #: found none (seen in CI: ``report_refs`` without ``md``)
        self._shown_while_saving: IncidentView | None = None
        self._confirmation: RootCauseConfirmation | None = None
        #: what the incident's replays have spent of its one budget, and since when
        self._spent = BudgetUsage()
        self._replaying_since: datetime | None = None
        self._poked = False

    # signals --------------------------------------------------------------------------------

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

    # the view -------------------------------------------------------------------------------

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
        before = self._view
        self._update(phase=phase)
        self._event(phase, detail)
        workflow.upsert_search_attributes([INCIDENT_PHASE.value_set(phase.value)])
        # as a replay's: the list shows IncidentPhase, the workflow's page these details
        workflow.set_current_details(
            f"Replaybook incident: {phase.value}" + (f": {detail}" if detail else "")
        )
        if phase in (IncidentPhase.COMPLETED, IncidentPhase.FAILED):
            self._shown_while_saving = before
            try:
                await self._save()
            finally:
                self._shown_while_saving = None

    @property
    def _shown(self) -> IncidentView | None:
        """What the status query answers (a query changes nothing and issues no command)."""
        return self._view if self._shown_while_saving is None else self._shown_while_saving

    async def _save(self) -> None:
        await workflow.execute_activity_method(
            IncidentActivities.save_incident,
            self._current,
            start_to_close_timeout=SHORT,
            retry_policy=RETRY,
        )

    # the replays' memo and budget -------------------------------------------------------------

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

    def _spend(self, outcome: ReplayOutcome) -> None:
        """A finished replay's use counted against the incident's budget (its time is counted
        from the first replay on, in ``_allotments``, not per replay)."""
        self._spent = self._spent.plus(
            outcome.budget_used.model_copy(update={"duration_seconds": 0.0})
        )


def incident_replay(label: str, outcome: ReplayOutcome) -> IncidentReplay:
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
