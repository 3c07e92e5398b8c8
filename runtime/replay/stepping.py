"""Executing a replay one step at a time.

Each step is recorded whole or not at all (the recorder is deferred and flushes with the
expected sequence), so a step retried after a crash never duplicates events: if the step was
already recorded, its recorded result is returned instead of running it again.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from models import ExecutionEventType, PolicyDecisionRecord, RunStatus
from models.canonical import normalize_json
from models.errors import (
    ActionRefusedError,
    BudgetExhaustedError,
    FixtureMissError,
    ReplaybookError,
    SequenceConflictError,
)
from models.replay_flow import ReplayCursorsView, ReplayPlan, StepInput, StepOutput
from runtime.environment import AgentEnvironment
from runtime.executor import migrate_recorded_state, store_random_state
from runtime.graph import GraphDefinition
from runtime.ports import EventLedger
from runtime.privacy.redaction import replay_redaction
from runtime.recorder import RunRecorder
from runtime.replay.catalog import AgentCatalog
from runtime.replay.environment import EnvironmentHost, step_environment
from runtime.replay.gateways import FixedAgentClock, StepLedger
from runtime.replay.source import ReplaySource

E = ExecutionEventType
#: errors that end a replay with a (partial) result instead of failing it
STOPPING_ERRORS = (BudgetExhaustedError, FixtureMissError, ActionRefusedError)


class StepHost(EnvironmentHost, Protocol):
    """What a step reads from the engine that runs it (a sandboxed process's engine reads
    the source through the worker)."""

    ledger: EventLedger
    isolation: str | None

    async def step_source(self, run_id: str) -> ReplaySource: ...

    def catalog(self, graph_id: str) -> AgentCatalog: ...


class StepMemory:
    """What this process remembers of each replay after the last step it ran of it, so the
    next step at that head reads neither its consumption nor its policy decisions again."""

    def __init__(self) -> None:
        #: replay id -> (head, consumed fixtures, consumed retrievals) after its last step here
        self._consumption: dict[str, tuple[int, dict[str, int], dict[str, int]]] = {}
        #: replay id -> (head, the policy decisions the replay took) after its last step here
        self._decisions: dict[str, tuple[int, list[PolicyDecisionRecord]]] = {}

    def ran_up_to(self, replay_id: str, head: int) -> bool:
        return self._consumption.get(replay_id, (None,))[0] == head

    def decisions_at(self, replay_id: str, head: int) -> list[PolicyDecisionRecord] | None:
        cached = self._decisions.get(replay_id)
        return cached[1] if cached is not None and cached[0] == head else None

    def keep(
        self,
        replay_id: str,
        head: int,
        positions: StepLedger,
        decisions: list[PolicyDecisionRecord],
    ) -> None:
        self._consumption[replay_id] = (head, positions.fixtures, positions.retrievals)
        self._decisions[replay_id] = (head, decisions)

    def forget(self, replay_id: str) -> None:
        self._consumption.pop(replay_id, None)
        self._decisions.pop(replay_id, None)

    async def consumed(
        self, ledger: EventLedger, plan: ReplayPlan, source: ReplaySource, head: int
    ) -> tuple[dict[str, int], dict[str, int]]:
        """How often each recorded request was already answered in this replay: the fork's
        position in the source plus the replay's own TOOL_CALL and RETRIEVAL events (kept per
        replay in this process; recomputed from the ledger when another worker ran the step)."""
        cached = self._consumption.get(plan.replay_id)
        if cached is not None and cached[0] == head:
            # handed over, not copied: a copy per step grew with the replay (one entry per
            # distinct request: O(steps) a step, 50,000 steps quadratic). The step counts into
            # them and ``keep`` stores them at its new head; a step that fails before leaves
            # no entry, and the next attempt counts again from the ledger
            del self._consumption[plan.replay_id]
            return cached[1], cached[2]
        fixtures: dict[str, int] = {}
        retrievals: dict[str, int] = {}
        fork = source.fork_point(plan.from_step) if plan.from_step else None
        if fork is not None:
            fixtures, retrievals = dict(fork.fixtures), dict(fork.retrievals)
        loaded = await ledger.events_with_payloads(
            plan.replay_id, types=frozenset({E.TOOL_CALL, E.RETRIEVAL})
        )
        for event, data in loaded:
            if event.sequence > head:
                break
            payload = json.loads(data or b"{}")
            if event.type is E.TOOL_CALL:
                fixtures[payload["request_hash"]] = fixtures.get(payload["request_hash"], 0) + 1
            else:
                retrievals[payload["query_hash"]] = retrievals.get(payload["query_hash"], 0) + 1
        return fixtures, retrievals


async def run_step(host: StepHost, memory: StepMemory, step: StepInput) -> StepOutput:
    """Execute one step of the replay; idempotent across retries (see module docstring)."""
    plan = step.plan
    # this engine recorded the replay up to ``head`` itself: an earlier attempt of this
    # step elsewhere is still possible, and the conditional append below finds it out
    # (then ``already_recorded`` answers); else look before running anything
    ours = memory.ran_up_to(plan.replay_id, step.head)
    recorded = None if ours else await already_recorded(host.ledger, step)
    if recorded is not None:
        await close_if_finished(host.ledger, step.plan, recorded)
        return recorded
    source = await host.step_source(plan.source_run_id)
    catalog = host.catalog(source.run.graph_id)
    graph = catalog.graphs.get(source.run.graph_id, source.run.graph_version)
    fixtures, retrievals = await memory.consumed(host.ledger, plan, source, step.head)
    positions = StepLedger(
        model_calls=step.cursors.model_calls,
        clock_reads=step.cursors.clock_reads,
        fixtures=fixtures,
        retrievals=retrievals,
    )
    recorder = _step_recorder(host, step, source, catalog, positions)
    env = await step_environment(
        host,
        plan,
        source,
        catalog,
        recorder,
        positions,
        step.usage,
        step.cursors,
        memory.decisions_at(plan.replay_id, step.head),
    )
    state = await _step_state(host, step, source, graph, recorder)

    started: dict[str, Any] = {"step": step.step_id}
    if host.isolation is not None:
        started["isolation"] = host.isolation
    await recorder.record(E.STEP_STARTED, payload=started)
    stopped, next_step, outcome, state_ref = await _execute_step(
        step, graph, env, state, source, recorder
    )
    output = StepOutput(
        step_id=step.step_id,
        next_step=next_step,
        state_ref=state_ref,
        cursors=ReplayCursorsView(
            model_calls=positions.model_calls,
            clock_reads=positions.clock_reads,
            random_state_ref=await store_random_state(recorder, env.random),
        ),
        head=step.head,
        writes_blocked=positions.writes_blocked,
        fixture_misses=positions.fixture_misses,
        sandbox_live_calls=positions.sandbox_live_calls,
        usage=positions.usage(),
        stopped=stopped,
        finished=stopped is not None or next_step is None,
    )
    return await _commit_step(host.ledger, memory, step, recorder, env, positions, output, outcome)


async def _commit_step(
    ledger: EventLedger,
    memory: StepMemory,
    step: StepInput,
    recorder: RunRecorder,
    env: AgentEnvironment,
    positions: StepLedger,
    output: StepOutput,
    outcome: Any,
) -> StepOutput:
    """Record the step's end and flush the step at once after ``head`` (an earlier attempt
    that got there first answers instead); the replay's run is closed after its last step."""
    plan = step.plan
    await _record_step_end(recorder, output, outcome)
    try:
        await recorder.flush(expected_sequence=step.head + 1)
    except SequenceConflictError:
        again = await already_recorded(ledger, step)
        if again is None:
            raise
        await close_if_finished(ledger, plan, again)
        return again
    memory.keep(plan.replay_id, recorder.last_sequence, positions, env.policy.decisions())
    if output.finished:
        memory.forget(plan.replay_id)
        stopped = output.stopped
        status = RunStatus.FAILED if stopped else RunStatus.COMPLETED
        # the header shows the outcome as chained in RUN_COMPLETED (sanitized, rule 17)
        await ledger.finish_run(
            plan.replay_id,
            status,
            recorder.hashing_view(outcome) if not stopped else {"stopped": stopped},
        )
    return output.model_copy(update={"head": recorder.last_sequence})


def batch_total(total: StepOutput | None, out: StepOutput) -> StepOutput:
    """A batch's output so far with one more step's: its counters summed, its position."""
    if total is None:
        return out
    return out.model_copy(
        update={
            "steps": total.steps + 1,
            "writes_blocked": total.writes_blocked + out.writes_blocked,
            "fixture_misses": total.fixture_misses + out.fixture_misses,
            "sandbox_live_calls": total.sandbox_live_calls + out.sandbox_live_calls,
            "usage": total.usage.plus(out.usage),
        }
    )


def next_in_batch(current: StepInput, out: StepOutput) -> StepInput:
    """The input of the step after ``current`` in the same batch."""
    return current.model_copy(
        update={
            "step_id": out.next_step,
            "state_ref": out.state_ref,
            "cursors": out.cursors,
            "head": out.head,
            "usage": current.usage.plus(out.usage),
            "step_index": current.step_index + 1,
        }
    )


async def close_if_finished(ledger: EventLedger, plan: ReplayPlan, output: StepOutput) -> None:
    """An earlier attempt recorded the replay's last step but died before closing the
    run's header: close it now (COMPLETED with the recorded outcome, or FAILED), so a
    worker killed at that moment does not leave the replay's run RUNNING."""
    if not output.finished:
        return
    run = await ledger.get_run(plan.replay_id)
    if run.status is not RunStatus.RUNNING:
        return
    ends = await ledger.events_with_payloads(
        plan.replay_id, types=frozenset({E.RUN_COMPLETED, E.RUN_FAILED})
    )
    payload = json.loads(ends[-1][1] or b"{}") if ends else {}
    if output.stopped:
        await ledger.finish_run(plan.replay_id, RunStatus.FAILED, {"stopped": output.stopped})
    else:
        await ledger.finish_run(plan.replay_id, RunStatus.COMPLETED, payload.get("outcome"))


async def already_recorded(ledger: EventLedger, step: StepInput) -> StepOutput | None:
    """This step's output if an earlier attempt recorded it (the chain moved past ``head``):
    the first STEP_COMPLETED after ``head``, ending at it (or at the run's end right after)."""
    events = await ledger.events(step.plan.replay_id, from_sequence=step.head + 1)
    for index, event in enumerate(events):
        if event.type is E.STEP_COMPLETED:
            payload = json.loads(await ledger.payload(event))
            output = StepOutput.model_validate(payload["replay_step"])
            end = event.sequence
            if index + 1 < len(events) and events[index + 1].type in (
                E.RUN_COMPLETED,
                E.RUN_FAILED,
            ):
                end = events[index + 1].sequence
            return output.model_copy(update={"head": end})
    return None


def _step_recorder(
    host: StepHost,
    step: StepInput,
    source: ReplaySource,
    catalog: AgentCatalog,
    positions: StepLedger,
) -> RunRecorder:
    """The deferred recorder of one step, after the replay's ``head``, reading the source's
    clock."""
    # the source's redaction policy: lookup hashes match the source's, and anything a live
    # model adds is sanitized like the source was
    recorder = RunRecorder(
        host.ledger,
        host.artifacts,
        step.plan.replay_id,
        deferred=True,
        redaction=replay_redaction(source.run, catalog.capabilities),
    )
    recorder.clock = FixedAgentClock(source, positions, recorder)
    recorder.last_sequence = step.head
    recorder.step_id = step.step_id
    return recorder


async def _step_state(
    host: StepHost,
    step: StepInput,
    source: ReplaySource,
    graph: GraphDefinition,
    recorder: RunRecorder,
) -> dict[str, Any]:
    """The state the step starts from: empty, the previous step's, or (the first step of a
    fork) the source's checkpoint migrated to the deployed graph's schema."""
    plan = step.plan
    state: dict[str, Any] = (
        json.loads(await host.artifacts.get(step.state_ref)) if step.state_ref else {}
    )
    if step.state_ref and step.step_index == 0 and plan.from_step:
        fork = source.fork_point(plan.from_step)
        if fork is None or fork.state_schema_version is None:  # prepare refuses such a fork
            raise ReplaybookError(f"step {plan.from_step!r} has no checkpoint to fork from")
        state = await migrate_recorded_state(graph, recorder, state, fork.state_schema_version)
    return state


async def _execute_step(
    step: StepInput,
    graph: GraphDefinition,
    env: AgentEnvironment,
    state: dict[str, Any],
    source: ReplaySource,
    recorder: RunRecorder,
) -> tuple[str | None, str | None, Any, str | None]:
    """Run the step's code: (why it stopped the replay, the next step, its output, the state
    checkpointed after it). A stopping error (budget, fixture miss, refused action) stops the
    replay; the state is then left as it was."""
    stopped: str | None = None
    next_step: str | None = None
    outcome: Any = None
    state_ref = step.state_ref
    try:
        # the candidates' system prompt and tool catalogue, when swapped in
        result = await graph.steps[step.step_id](
            env, state, step.plan.agent_input_for(source.agent_input)
        )
    except FixtureMissError as exc:
        # the verdict names where and for what (issue 16): "fixture miss at step S for …"
        capability = exc.capability_id or "unknown"
        stopped = (
            f"FixtureMissError: fixture miss at step {step.step_id} "
            f"for capability {capability}: {exc}"
        )
    except STOPPING_ERRORS as exc:
        stopped = f"{type(exc).__name__}: {exc}"
    else:
        checkpoint = await recorder.checkpoint(
            step.step_id, result.state, graph.state_schema_version, None
        )
        state_ref, next_step, outcome = (
            checkpoint.state_ref,
            result.next,
            normalize_json(result.output),
        )
    return stopped, next_step, outcome, state_ref


async def _record_step_end(recorder: RunRecorder, output: StepOutput, outcome: Any) -> None:
    """STEP_COMPLETED carrying the step's output (so a retry finds it), then RUN_FAILED
    (partial) when the replay stopped here or RUN_COMPLETED when it finished."""
    marker = {"replay_step": output.model_dump(mode="json")}
    await recorder.record(
        E.STEP_COMPLETED, payload={"next": output.next_step, "output": outcome, **marker}
    )
    if output.stopped is not None:
        recorder.step_id = "run"
        error = output.stopped.split(":", 1)[0]
        await recorder.record(
            E.RUN_FAILED,
            payload={"error": error, "message": output.stopped, "partial": True, **marker},
        )
    elif output.finished:
        recorder.step_id = "run"
        await recorder.record(E.RUN_COMPLETED, payload={"outcome": outcome, **marker})
