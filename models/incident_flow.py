"""What travels through Temporal for an incident (ids, hashes, small facts — no payloads)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from models.base import Instant, Record
from models.enums import AgentFailureType, FixtureMissPolicy, ReplayConfidence, ReplayMode
from models.fork_points import ForkPoint, ForkResult
from models.replay import ReplayBudget
from models.replay_plans import candidate_mode
from models.retry_flow import SideEffectRetryResult
from models.tools_module import ToolsModulePin
from models.watch import WatchCounts


class IncidentPhase(StrEnum):
    FREEZING = "FREEZING"
    RECONCILING = "RECONCILING"
    SIGNING = "SIGNING"
    REPLAYING = "REPLAYING"
    COUNTERFACTUALS = "COUNTERFACTUALS"
    AWAITING_CONFIRMATION = "AWAITING_CONFIRMATION"
    CREATING_REGRESSION_CASE = "CREATING_REGRESSION_CASE"
    REPORTING = "REPORTING"
    #: the recurrence watch (canary), when asked for: new runs with the fix version judged
    WATCHING = "WATCHING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


class Counterfactual(Record):
    """One swap to try against the incident: ``prompt=v18``, ``model=M``, ``policy=V``…"""

    #: ``system_prompt`` and ``tools``: a tool-loop run's candidate system prompt and tool
    #: catalogue, ``value`` their artifact digest
    kind: Literal["prompt", "model", "policy", "retriever", "system_prompt", "tools"]
    value: str = Field(min_length=1)

    @property
    def label(self) -> str:
        return f"{self.kind}={self.value}"

    @property
    def mode(self) -> ReplayMode:
        return candidate_mode({self.kind: self.value})


class IncidentRequest(Record):
    incident_id: str = Field(min_length=1)
    source_run_id: str = Field(min_length=1)
    counterfactuals: tuple[Counterfactual, ...] = ()
    repeat: int = Field(default=20, ge=1, le=1000)
    miss_policy: FixtureMissPolicy = FixtureMissPolicy.FAIL
    retention_days: int = Field(default=730, ge=1)
    #: one budget for every replay of the incident (exact and counterfactuals, all repeats);
    #: no limit unless given
    budget: ReplayBudget = ReplayBudget()
    #: after reconciling, retry durably each side effect reconciled NOT applied
    #: (``SideEffectRetry`` child workflows, id = the side effect id)
    retry_not_applied: bool = False
    #: fork replays from the top K ranked fork points, with each counterfactual (0: none); they
    #: run before the whole-run counterfactual replays (divergence first)
    fork_points: int = Field(default=0, ge=0, le=20)
    #: with ``fork_points``: the fork replays instead of the whole-run counterfactual replays
    #: (the exact replay still runs: it shows the failure reproduces)
    fork_first: bool = False
    #: after the report, watch new runs with the fix version until this many are clean
    #: (0: no watch), at most ``watch_days``; looks every ``watch_interval_seconds`` (or when
    #: signalled ``run_recorded``)
    watch_clean_runs: int = Field(default=0, ge=0, le=100_000)
    watch_days: float = Field(default=14.0, gt=0, le=365)
    watch_interval_seconds: float = Field(default=300.0, ge=0.5, le=86_400)
    #: the incident this one was opened from, when the failure recurred on its fix version
    linked_incident_id: str | None = None
    #: the registered model every replay of the incident calls instead of the recorded one
    #: (an imported run's model is rarely deployed here); pinned in each replay's manifest
    substitute_model: str | None = Field(default=None, min_length=1)
    #: the team's read-only tools answering every replay's fixture misses under
    #: ``SANDBOX_LIVE`` inside the sandbox (``--tools-module``), pinned by its source hash
    tools_module: ToolsModulePin | None = None
    #: set by continue-as-new during the watch: the view to go on watching with
    resume: IncidentView | None = None


class SideEffectResolution(Record):
    side_effect_id: str = Field(min_length=1)
    outcome: Literal["applied", "not-applied"]
    evidence: str = Field(min_length=1)
    resolved_by: str = Field(min_length=1)


class RootCauseConfirmation(Record):
    """A human's conclusion from evidence and replays (rule 18): never produced automatically."""

    root_cause: str = Field(min_length=1)
    fix_version: str = Field(min_length=1)
    verified_by: str = Field(min_length=1)
    #: the replays of this incident the conclusion rests on (at least one)
    replay_ids: tuple[str, ...] = Field(min_length=1)
    #: the human's failure type; overrides the automatic classification, which is kept too
    failure_type: AgentFailureType | None = None
    #: the human's expected behaviour in the expectation language (``models.expectations``);
    #: the regression case asserts them besides the built-in assertions
    expectations: tuple[str, ...] = ()


class RejectedSignal(Record):
    """A signal the incident refused (it failed validation): kept, with why, not dropped."""

    name: str
    reason: str
    at: Instant


class PendingTask(Record):
    kind: Literal["resolve_side_effect", "confirm_root_cause"]
    side_effect_id: str | None = None
    detail: str


class IncidentReplay(Record):
    replay_id: str
    label: str
    mode: ReplayMode
    status: str
    confidence: ReplayConfidence = ReplayConfidence.LIMITED
    reproduced: int | None = None
    #: every run, conclusive or not (``rate`` and ``ci95`` are over the conclusive ones only)
    runs: int | None = None
    rate: float | None = None
    ci95: tuple[float, float] | None = None
    critical: bool = False
    first_divergent_step: str | None = None
    not_reproduced: int | None = None
    #: runs that stopped before their end (fixture miss, budget, sandbox, step error)
    inconclusive: int = 0
    inconclusive_reasons: dict[str, int] = Field(default_factory=dict)

    @property
    def conclusive_runs(self) -> int:
        return max((self.runs or 0) - self.inconclusive, 0)

    @property
    def established(self) -> bool:
        """Whether its rate says something: at least one conclusive run and none inconclusive
        (a counterfactual with inconclusive runs is "not established")."""
        return self.conclusive_runs > 0 and self.inconclusive == 0


class ReconcileOutcome(Record):
    side_effect_id: str
    capability_id: str
    status: str
    applied: bool | None = None
    needs_human: bool
    reason: str


class SignatureResult(Record):
    failure_type: str
    signature: str
    key: str
    explanation: str
    #: how many regression assertions the facts yield on their own (None: not counted, in
    #: incidents signed before this was); 0 means a confirmation must bring an expectation
    builtin_assertions: int | None = None
    #: other signatures the facts also match (``FailureClassification.contributing``)
    contributing: tuple[str, ...] = ()


class FreezeSummary(Record):
    freeze_id: str
    artifact_count: int
    chain_head_sequence: int
    chain_head_hash: str
    retention_until: Instant
    enforced_by_backend: bool


class TimelineEntry(Record):
    phase: str
    at: Instant
    detail: str = ""


def prompt_swap_fixes(replays: tuple[IncidentReplay, ...]) -> bool:
    """The incident's replays say a prompt swap fixes the failure: the exact replay reproduced
    it at least once and a completed prompt counterfactual never did."""
    exact = any(r.label == "exact" and (r.reproduced or 0) > 0 for r in replays)
    return exact and any(
        r.label.startswith("prompt=") and r.status == "COMPLETED" and r.runs and r.reproduced == 0
        for r in replays
    )


class IncidentView(Record):
    """What the ``status`` query answers and the report is built from."""

    incident_id: str
    source_run_id: str
    phase: IncidentPhase = IncidentPhase.FREEZING
    signature: SignatureResult | None = None
    freeze: FreezeSummary | None = None
    side_effects: tuple[ReconcileOutcome, ...] = ()
    replays: tuple[IncidentReplay, ...] = ()
    pending: tuple[PendingTask, ...] = ()
    confirmation: RootCauseConfirmation | None = None
    regression_case_id: str | None = None
    report_refs: dict[str, str] = Field(default_factory=dict)
    timeline: tuple[TimelineEntry, ...] = ()
    error: str | None = None
    rejected_signals: tuple[RejectedSignal, ...] = ()
    #: the retries ``retry_not_applied`` ran, with their results
    retries: tuple[SideEffectRetryResult, ...] = ()
    #: the ranked candidate fork points (``fork_points`` > 0), best first
    fork_points: tuple[ForkPoint, ...] = ()
    #: the fork replays of the top points, with their reproduction rates
    fork_results: tuple[ForkResult, ...] = ()
    #: the recurrence watch's counts (WATCHING), and the incident this one recurs from
    watch: WatchCounts | None = None
    linked_incident_id: str | None = None
    #: the model every replay called instead of the recorded one (``substitute_model``)
    substitute_model: str | None = None

    @property
    def automatic_failure_type(self) -> str | None:
        """The automatic classification's failure type (None before the failure is signed)."""
        return self.signature.failure_type if self.signature else None

    @property
    def failure_type(self) -> str | None:
        """The incident's failure type everywhere it is shown or counted: the human's once
        confirmed with one (rule 18: a human's word wins), else the automatic one."""
        confirmed = self.confirmation.failure_type if self.confirmation else None
        return confirmed.value if confirmed is not None else self.automatic_failure_type

    @property
    def failure_type_confirmed(self) -> bool:
        """Whether ``failure_type`` is a human's."""
        return self.confirmation is not None and self.confirmation.failure_type is not None


IncidentRequest.model_rebuild()
