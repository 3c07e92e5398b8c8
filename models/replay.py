"""Replay requests, manifests, budgets and behavioural comparisons."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from pydantic import Field

from models.base import Digest, HashedRecord, Identifier, Instant, Record
from models.enums import DiffType, FixtureMissPolicy, ReplayConfidence, ReplayMode, ReplayStatus
from models.tools_module import ToolsModulePin


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
    #: a tool-loop run's candidate system prompt and tool catalogue (artifact digests), when
    #: swapped in (``--system-prompt-file``, ``--tools-file``)
    candidate_system_prompt: Digest | None = None
    candidate_tools: Digest | None = None
    #: the team's tools module that answered fixture misses live (``--tools-module``)
    tools_module: ToolsModulePin | None = None
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

    def canonical_payload(self) -> dict[str, Any]:
        # a manifest with no candidate hashes as manifests did before candidates existed
        data = super().canonical_payload()
        for key in ("candidate_system_prompt", "candidate_tools", "tools_module"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


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
    #: how many differences the whole comparison holds, when ``diffs`` carries only the first
    #: of them (``carried``); None when ``diffs`` is all of them
    diffs_total: int | None = None
    #: the artifact digest (id and hash at once) of the whole comparison, as JSON
    ref: str | None = None

    @property
    def critical(self) -> bool:
        return any(diff.critical for diff in self.diffs)

    def carried(self, ref: str, max_bytes: int) -> ReplayComparison:
        """This comparison as it travels through Temporal: a reference to the whole one (the
        artifact ``ref``) and its differences in order while their JSON stays under
        ``max_bytes`` (a long diverging run has thousands: past Temporal's 2 MB payload limit,
        TMPRL1103). The first critical difference is always carried, so ``critical`` says what
        the whole comparison's says."""
        kept: list[TrajectoryDiff] = []
        size = 0
        for diff in self.diffs:
            size += len(diff.model_dump_json())
            if size > max_bytes:
                break
            kept.append(diff)
        first_critical = next((d for d in self.diffs if d.critical), None)
        if first_critical is not None and first_critical not in kept:
            kept.append(first_critical)
        total = len(self.diffs) if len(kept) < len(self.diffs) else None
        return self.model_copy(update={"diffs": tuple(kept), "diffs_total": total, "ref": ref})


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
