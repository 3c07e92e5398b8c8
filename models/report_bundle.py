"""Everything the incident report renders, in one record (``forensics.report`` renders it).

A ``ReportBundle`` is gathered once the incident has its facts: the ``FailureForensicsReport``,
the source run's trajectory, optionally one replay's trajectory (and its comparison) to show
side by side, the incident timeline, the automatic failure classification, the regression cases
and any task still waiting for a human. It holds no rendering and no clock: rendering the same
bundle twice gives the same bytes.

The classification is the automatic one (``models.signatures``); it is never the root cause.
Only ``report.confirmed_root_cause`` is, and only a human sets it (rule 18).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from models.base import HashedRecord, Identifier, Instant, Record
from models.enums import AgentFailureType
from models.fork_points import ForkPoint, ForkResult
from models.incident import FailureForensicsReport
from models.regression import RegressionCase
from models.replay import ReplayComparison, TrajectoryDiff
from models.signatures import FailureClassification
from models.trajectory import Trajectory

__all__ = [
    "FailureSummary",
    "PendingTask",
    "ReportBundle",
    "SideEffectStatusChange",
    "SideEffectTruth",
    "TimelineEntry",
]


class TimelineEntry(Record):
    """One incident phase as it happened (e.g. ``FREEZING`` at 03:02:11, "42 events frozen")."""

    phase: str = Field(min_length=1)
    at: Instant
    detail: str = ""


class FailureSummary(Record):
    """The automatic classification as the report shows it: a label, never a root cause."""

    failure_type: AgentFailureType
    signature: str = Field(min_length=1)
    explanation: str = ""

    @classmethod
    def of(cls, classification: FailureClassification) -> FailureSummary:
        return cls(
            failure_type=classification.failure_type,
            signature=classification.signature,
            explanation=classification.explanation,
        )


class PendingTask(Record):
    """Something the incident waits for a human to do, and the command that does it."""

    #: e.g. ``CONFIRM_ROOT_CAUSE``, ``RESOLVE_SIDE_EFFECT``
    kind: str = Field(min_length=1)
    #: what it is about, e.g. a side-effect id
    subject: str | None = None
    detail: str = ""
    command: str | None = None


class SideEffectStatusChange(Record):
    """One recorded state of a side effect: the chained event that recorded it."""

    status: str = Field(min_length=1)
    sequence: int = Field(ge=1)
    at: Instant


class SideEffectTruth(Record):
    """What really happened to one write of the source run — the first thing a report answers
    ("did the refund happen?"): its status history from the chain, what reconciliation (or a
    human) concluded and on what evidence, and the provider's receipt and request id."""

    side_effect_id: Identifier
    capability_id: str
    step_id: str
    status: str
    #: whether it took effect: True / False once known, None while UNKNOWN
    applied: bool | None = None
    history: tuple[SideEffectStatusChange, ...] = ()
    #: the reconciliation's result, e.g. ``RECONCILED applied`` or ``waiting for a human``
    reconciliation: str | None = None
    #: what the conclusion rests on (the reconciler's reason or the human's evidence)
    evidence: str | None = None
    provider_request_id: str | None = None
    provider_receipt: str | None = None
    idempotency_key: str | None = None


class ReportBundle(HashedRecord):
    report: FailureForensicsReport
    #: the source run's behaviour; its ``run_id`` is the report's ``source_run_id``
    source: Trajectory
    #: one replay's behaviour, shown side by side with the source
    replay: Trajectory | None = None
    #: ``replay`` compared with ``source``; computed by the renderer when absent
    comparison: ReplayComparison | None = None
    #: replay id → what it varied, e.g. ``"prompt=v18"``; keys are ids of ``report.replays``
    replay_labels: dict[str, str] = Field(default_factory=dict)
    timeline: tuple[TimelineEntry, ...] = ()
    classification: FailureSummary | None = None
    regression_case_ids: tuple[Identifier, ...] = ()
    #: the full cases, when at hand (each listed in ``regression_case_ids``)
    regression_cases: tuple[RegressionCase, ...] = ()
    pending: tuple[PendingTask, ...] = ()
    #: every write of the source run and what really happened to it (shown first)
    side_effects: tuple[SideEffectTruth, ...] = ()
    #: the ranked candidate fork points and their fork replays (``incident open --fork-points``)
    fork_points: tuple[ForkPoint, ...] = ()
    fork_results: tuple[ForkResult, ...] = ()
    #: the EXACT replays' PROMPT_DRIFT differences (compiled hashes and unified diff), each
    #: explanation starting with the replay run it was found in
    prompt_drifts: tuple[TrajectoryDiff, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> ReportBundle:
        if self.source.run_id != self.report.source_run_id:
            raise ValueError(
                f"the source trajectory is of run {self.source.run_id!r}, "
                f"the report's source run is {self.report.source_run_id!r}"
            )
        if self.comparison is not None and self.replay is None:
            raise ValueError("a comparison needs the replay trajectory it was computed from")
        known = {r.replay_id for r in self.report.replays}
        unknown = sorted(set(self.replay_labels) - known)
        if unknown:
            raise ValueError(f"replay_labels name replays not in the report: {unknown}")
        unlisted = [c.case_id for c in self.regression_cases]
        unlisted = [i for i in unlisted if i not in self.regression_case_ids]
        if unlisted:
            raise ValueError(f"regression cases not listed in regression_case_ids: {unlisted}")
        return self

    @property
    def incident_id(self) -> str:
        return self.report.incident_id
