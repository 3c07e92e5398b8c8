"""Replay requests, manifests, budgets and behavioural comparisons."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from pydantic import Field

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import DiffType, FixtureMissPolicy, ReplayConfidence, ReplayMode, ReplayStatus


class ReplayBudget(Record):
    """Limits a replay stops at, with a partial result (rule 15). ``None`` = no limit."""

    max_model_calls: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_cost: Decimal | None = Field(default=None, ge=0)
    max_duration: timedelta | None = None


class ReplayRequest(Record):
    """One request; the modes are presets of it with optional overrides."""

    source_run_id: Identifier
    mode: ReplayMode
    candidate_prompt_version: str | None = None
    candidate_model: str | None = None
    start_from_step: str | None = None
    policy_version: str | None = None
    retriever_version: str | None = None
    deny_approvals: tuple[str, ...] = ()
    budget: ReplayBudget = ReplayBudget()
    fixture_miss_policy: FixtureMissPolicy = FixtureMissPolicy.FAIL
    repeat: int = Field(default=1, ge=1, le=1000)
    #: a world that never existed (e.g. injected faults): reported as simulation, never as replay
    simulation: bool = False


class ReplayManifest(HashedRecord):
    """What a replay was bound to: the source run and every pinned version it used."""

    replay_id: Identifier
    source_run_id: Identifier
    source_run_version: str
    model_profile: str | None = None
    #: the model profile the source run recorded (issue 16: EXACT replays that one)
    recorded_model_profile: str | None = None
    #: set when ``--substitute-model`` replaced the recorded model: the substitute's name
    substituted_model: str | None = None
    prompt_bundle_hash: Digest | None = None
    graph_version: Identifier
    policy_version: str | None = None
    capability_registry_version: str | None = None
    knowledge_snapshot: str | None = None
    evaluator_version: str | None = None
    logical_time: Instant
    environment_hash: Digest | None = None
    mode: ReplayMode
    simulation: bool = False


class TrajectoryDiff(Record):
    """One behavioural difference between source and replay: a result, not an error."""

    type: DiffType
    source_step: str | None = None
    replay_step: str | None = None
    explanation: str
    critical: bool = False
    #: PROMPT_DRIFT: the recorded and today's compiled prompt hashes, and their unified diff
    source_prompt_hash: str | None = None
    replay_prompt_hash: str | None = None
    prompt_diff: str | None = None


class ReplayComparison(Record):
    """Behavioural equivalence (rule 13): outcome, tool sequence, side effects, wording."""

    same_outcome: bool
    same_tool_sequence: bool
    same_side_effects: bool
    answer_similarity: float = Field(ge=0.0, le=1.0)
    diffs: tuple[TrajectoryDiff, ...] = ()
    first_divergent_step: str | None = None

    @property
    def critical(self) -> bool:
        return any(diff.critical for diff in self.diffs)


class ReplayResult(Record):
    """A finished replay (or a batch of ``runs`` repeats) as reported."""

    replay_id: Identifier
    mode: ReplayMode
    status: ReplayStatus
    confidence: ReplayConfidence
    comparison: ReplayComparison | None = None
    reproduced: int | None = Field(default=None, ge=0)
    runs: int | None = Field(default=None, ge=1)
    rate: float | None = Field(default=None, ge=0.0, le=1.0)
    #: runs that stopped before their end; ``reproduced``/``rate`` are over the others only
    inconclusive: int = Field(default=0, ge=0)
    inconclusive_reasons: dict[str, int] = Field(default_factory=dict)
    #: how its steps were isolated (``bubblewrap``, ``none (dev flag)``, or both when steps ran
    #: on differently configured workers); None when the replay did not record it
    isolation: str | None = None
