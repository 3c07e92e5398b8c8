"""What travels through Temporal for a replay: ids, hashes, small counters — never payloads."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import Field, JsonValue

from models.base import Instant, Record
from models.budget import BudgetUsage
from models.enums import (
    FixtureMissPolicy,
    InconclusiveReason,
    ReplayConfidence,
    ReplayMode,
    ReplayStatus,
    ReplayVerdict,
)
from models.ingest import TOOL_LOOP_GRAPH_ID
from models.replay import ReplayBudget, ReplayComparison, ReplayManifest
from models.tools_module import ToolsModulePin

#: the default of ``ReplayPlan.max_loop_calls``: a few turns of an imported tau-bench
#: conversation (its recorded runs allow 30 model calls); what it costs on a small local model
#: is measured in docs/tau-bench.md ("Measured")
DEFAULT_MAX_LOOP_CALLS = 6
#: the ``source`` labels of imported benchmark runs: each records the benchmark's own step
#: limit (tau-bench: 30) as the run's own, and by default its replays run to that limit, not
#: to ``DEFAULT_MAX_LOOP_CALLS`` (a shorter cap cuts episodes the benchmark allows)
BENCHMARK_SOURCES = ("tau-bench",)


class ReplayCursorsView(Record):
    """Positions in the source's model-call and clock streams. Which fixtures were consumed is
    not carried here (it grows with the run): the engine derives it from the replay's events."""

    model_calls: int = 0
    clock_reads: int = 0
    random_state_ref: str | None = None


#: an automatic activity batch: at most this many steps, ending after the step that passes
#: ``AUTO_BATCH_SECONDS``. Each activity costs a workflow task, a broker and a round trip to the
#: sandbox (~50-80 ms on 2 busy cores): 25-step batches made a 1,000-step recorded replay 1.4x
#: slower than 100-step ones. The time bound keeps progress and cancellation prompt when
#: steps are slow.
AUTO_BATCH_STEPS = 100
AUTO_BATCH_SECONDS = 2.0


class ReplayPlan(Record):
    """The resolved request: every override named, nothing left to look up."""

    replay_id: str
    source_run_id: str
    mode: ReplayMode
    prompt_version: str | None = None
    model_name: str | None = None
    #: a live replay's explicit substitute for the recorded model (recorded in the manifest)
    substitute_model: str | None = None
    #: a candidate compiled system prompt for a tool-loop run (``--system-prompt-file``): the
    #: artifact digest of its text (id and hash at once; the text never travels through
    #: Temporal)
    candidate_system_prompt: str | None = None
    #: a candidate tool catalogue for a tool-loop run (``--tools-file``: descriptions,
    #: schemas): the artifact digest of its canonical JSON
    candidate_tools: str | None = None
    #: the team's read-only tools answering fixture misses under ``SANDBOX_LIVE`` inside the
    #: sandbox (``--tools-module``): the module's name and the hash of its source files
    tools_module: ToolsModulePin | None = None
    policy_version: str | None = None
    retriever_version: str | None = None
    deny_approvals: tuple[str, ...] = ()
    #: the first step regenerated: its first run and everything after it re-run, what came
    #: before it taken from the source (its state from the previous step's checkpoint)
    from_step: str | None = None
    miss_policy: FixtureMissPolicy = FixtureMissPolicy.FAIL
    budget: ReplayBudget = ReplayBudget()
    repeat: int = Field(default=1, ge=1)
    simulation: bool = False
    #: varies the live model's sampling between repeats
    sampling_seed: int = 0
    #: the most live model calls one replay of a tool-loop run (an imported or ingested agent)
    #: may make, each child of a ``--repeat`` on its own; past it the replay stops, INCONCLUSIVE
    #: (BUDGET). None: only the recorded run's own limit (``--max-loop-calls 0``)
    max_loop_calls: int | None = Field(default=DEFAULT_MAX_LOOP_CALLS, ge=1)
    #: ``max_loop_calls`` is the default, not asked for: a benchmark run (``BENCHMARK_SOURCES``)
    #: then replays under its own recorded limit instead
    default_loop_cap: bool = False
    #: steps one activity may run, each still recorded atomically; 0 = automatic: up to
    #: ``AUTO_BATCH_STEPS`` steps or ``AUTO_BATCH_SECONDS`` of them. A duration budget ends a
    #: batch at the step input's ``deadline`` (``StepInput.batch_steps``); model, token and
    #: cost budgets are enforced inside a step, at the call
    steps_per_activity: int = Field(default=0, ge=0, le=1000)
    #: steps per workflow run before it continues as new (history stays far below its limits)
    steps_per_run: int = Field(default=5000, ge=1, le=100_000)
    #: step activities per workflow run before it continues as new: what a run's history grows
    #: with (a few events each).
    #: Continuing as new costs up to a second before the new run's first task is picked up,
    #: so a run holds as many batches as its history comfortably can (was: every 250 steps,
    #: four runs and 1-2 s of a 1,000-step replay)
    activities_per_run: int = Field(default=200, ge=1, le=2000)

    def loop_call_cap(self, graph_id: str, labels: Mapping[str, str] | None = None) -> int | None:
        """The cap on live model calls of this replay when it replays ``graph_id`` (a run with
        ``labels``): the tool loop's (whose length is the model's choice), no other graph's
        (theirs is fixed). By default an imported benchmark run has no cap but its own
        recorded limit (the benchmark's: tau-bench allows 30 steps)."""
        if graph_id != TOOL_LOOP_GRAPH_ID:
            return None
        if self.default_loop_cap and (labels or {}).get("source") in BENCHMARK_SOURCES:
            return None
        return self.max_loop_calls

    def agent_input_for(self, agent_input: Any) -> Any:
        """The input the replayed agent starts with: the source's, with a tool-loop run's system
        prompt and tool catalogue references swapped for the candidates'."""
        swaps = {
            key: ref
            for key, ref in (
                ("system_prompt_ref", self.candidate_system_prompt),
                ("tools_ref", self.candidate_tools),
            )
            if ref is not None
        }
        if not swaps or not isinstance(agent_input, dict):
            return agent_input
        return {**agent_input, **swaps}

    def activity_batch(self) -> int:
        """Steps one activity may run (``StepInput.batch_steps`` for a given input)."""
        return self.steps_per_activity or AUTO_BATCH_STEPS

    def activity_batch_seconds(self) -> float | None:
        """How long an automatic batch may run before it ends after its current step (None:
        ``steps_per_activity`` was set, and each batch runs exactly that many)."""
        return None if self.steps_per_activity else AUTO_BATCH_SECONDS


class PreparedReplay(Record):
    ok: bool
    problems: tuple[str, ...] = ()
    completeness_score: int = 0
    completeness_total: int = 6
    missing_evidence: tuple[str, ...] = ()
    confidence: ReplayConfidence = ReplayConfidence.LIMITED
    graph: str = ""
    start_step: str | None = None
    state_ref: str | None = None
    cursors: ReplayCursorsView = ReplayCursorsView()
    #: the replay run's head after its header events
    head: int = 0
    source_steps: int = 0
    #: what the replay is bound to (model profile, prompt bundle, versions): small, no payload
    manifest: ReplayManifest | None = None
    #: manifest keys where the replay worker differs from the recording (ENVIRONMENT_DRIFT)
    environment_drift: tuple[str, ...] = ()


class StepInput(Record):
    plan: ReplayPlan
    step_id: str
    state_ref: str | None
    cursors: ReplayCursorsView
    head: int
    usage: BudgetUsage = BudgetUsage()
    step_index: int = 0
    #: bytes the replay's earlier batches wrote through the sandbox broker (its quota)
    written_bytes: int = 0
    #: when the replay's ``max_duration`` runs out (its start plus the limit): a sandboxed
    #: step still running then is stopped and the replay ends INCONCLUSIVE (BUDGET); None
    #: without a time limit, and in histories recorded before the field existed
    deadline: Instant | None = None

    def batch_steps(self) -> int:
        """Steps this activity may run. A replay with a time limit runs whole batches too:
        the batch ends at ``deadline`` (``past_deadline``, checked between its steps, and a
        sandboxed step still running then is stopped), as the workflow would have stopped it
        between 1-step batches (an incident's children each have a share of its time: they ran
        one step per activity, each activity 0.3-0.5 s of Temporal round trips at load 7-10
        on 2 cores). An input without a deadline under a time limit (scheduled by a workflow from
        before the field) runs one step: the workflow checks the limit between activities."""
        if (
            not self.plan.steps_per_activity
            and self.plan.budget.max_duration is not None
            and self.deadline is None
        ):
            return 1
        return self.plan.activity_batch()

    def past_deadline(self, now: datetime) -> bool:
        """Whether the replay's time limit has run out at ``now`` (no limit: never)."""
        return self.deadline is not None and now >= self.deadline


class StepOutput(Record):
    step_id: str
    #: steps this activity ran (their counters are summed here)
    steps: int = 1
    next_step: str | None = None
    state_ref: str | None = None
    cursors: ReplayCursorsView = ReplayCursorsView()
    head: int
    writes_blocked: int = 0
    fixture_misses: int = 0
    sandbox_live_calls: int = 0
    usage: BudgetUsage = BudgetUsage()
    #: set when the replay stops here: budget spent, fixture miss, refused action…
    stopped: str | None = None
    finished: bool = False
    #: how the steps ran (rule 16): ``bubblewrap`` or ``none (dev flag)``; None in histories
    #: recorded before the field existed
    isolation: str | None = None
    #: bytes the replay has written through the sandbox broker so far, counted by the worker
    #: (0 when the steps ran unsandboxed)
    written_bytes: int = 0


class ComparisonResult(Record):
    comparison: ReplayComparison
    reproduced: bool
    #: writes of the replay that really reached a provider (``runtime.trajectory``)
    writes_executed: int = 0
    #: an imported tau-bench run replayed live: the benchmark's reward for the replayed
    #: conversation (0/1) and why; None otherwise
    counterfactual_reward: int | None = None
    counterfactual_reason: str | None = None


class ChildResult(Record):
    """One child of a ``--repeat`` replay as its parent reports it."""

    replay_id: str
    status: ReplayStatus
    verdict: ReplayVerdict | None = None
    inconclusive_reason: InconclusiveReason | None = None
    verdict_reason: str | None = None
    reproduced: bool | None = None
    budget_used: BudgetUsage = BudgetUsage()
    counterfactual_reward: int | None = None
    counterfactual_reason: str | None = None


class ReplayOutcome(Record):
    replay_id: str
    source_run_id: str
    mode: ReplayMode
    status: ReplayStatus
    confidence: ReplayConfidence = ReplayConfidence.LIMITED
    completeness: str = ""
    comparison: ReplayComparison | None = None
    reproduced: bool | None = None
    writes_blocked: int = 0
    writes_executed: int = 0
    fixture_misses: int = 0
    steps_executed: int = 0
    budget_used: BudgetUsage = BudgetUsage()
    partial: bool = False
    reason: str | None = None
    simulation: bool = False
    #: with --repeat: the children and the reproduction summary
    children: tuple[str, ...] = ()
    summary: dict[str, JsonValue] | None = None
    #: the isolation the steps ran under (see ``merge_isolation``); None when no step ran
    isolation: str | None = None
    #: REPRODUCED, NOT_REPRODUCED or INCONCLUSIVE (with the reason); None for a ``--repeat``
    #: parent (its summary counts the children's) and in histories from before verdicts
    verdict: ReplayVerdict | None = None
    inconclusive_reason: InconclusiveReason | None = None
    verdict_reason: str | None = None
    #: with --repeat: each child's verdict and budget use
    child_results: tuple[ChildResult, ...] = ()
    #: the replay's manifest (a --repeat parent: its first child's)
    manifest: ReplayManifest | None = None
    #: an imported tau-bench run replayed live: would this model have passed the task (the
    #: benchmark's reward 0/1 on the replayed conversation) and why
    counterfactual_reward: int | None = None
    counterfactual_reason: str | None = None


class ResumePoint(Record):
    """Where a replay stands between steps (carried across continue-as-new)."""

    prepared: PreparedReplay
    step_id: str | None
    state_ref: str | None
    cursors: ReplayCursorsView
    head: int
    started_at: Instant
    usage: BudgetUsage = BudgetUsage()
    writes_blocked: int = 0
    fixture_misses: int = 0
    steps_executed: int = 0
    isolation: str | None = None
    written_bytes: int = 0


class ReplayWorkflowInput(Record):
    plan: ReplayPlan
    resume: ResumePoint | None = None


class ReplayProgress(Record):
    """What the ``status`` query answers."""

    status: ReplayStatus
    confidence: ReplayConfidence | None = None
    completeness: str | None = None
    steps_executed: int = 0
    writes_blocked: int = 0
    reason: str | None = None


def merge_isolation(seen: str | None, new: str | None) -> str | None:
    """The isolation of a replay whose steps ran on several workers: one label when they all
    agree, else every label seen (``bubblewrap + none (dev flag)``), so a weaker isolation
    of any step is never hidden."""
    labels = {part for value in (seen, new) if value for part in value.split(" + ")}
    return " + ".join(sorted(labels)) or None
