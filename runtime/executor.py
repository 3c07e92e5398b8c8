"""Runs a graph step by step, checkpointing the state after every step."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

import structlog

from models import ExecutionEventType, RunStatus
from models.canonical import normalize_json
from runtime.environment import AgentEnvironment
from runtime.graph import GraphDefinition, State
from runtime.ports import ArtifactStore, EventLedger
from runtime.recorder import RunRecorder

log = structlog.get_logger(__name__)
E = ExecutionEventType


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: RunStatus
    outcome: Any
    state: State
    steps: int


class StepLimitExceeded(RuntimeError):
    pass


#: the most steps one run executes unless its ``AgentSpec.max_steps`` says otherwise; the
#: composition roots set the process default from ``REPLAYBOOK_MAX_STEPS``
DEFAULT_MAX_STEPS = 1000
_default_max_steps = DEFAULT_MAX_STEPS


def set_default_max_steps(limit: int) -> None:
    """Called by each composition root with ``Settings.max_steps``."""
    global _default_max_steps
    if limit < 1:
        raise ValueError("the step limit must be at least 1")
    _default_max_steps = limit


def default_max_steps() -> int:
    return _default_max_steps


async def execute_graph(
    graph: GraphDefinition,
    env: AgentEnvironment,
    recorder: RunRecorder,
    ledger: EventLedger,
    agent_input: Any,
    *,
    state: State | None = None,
    start_step: str | None = None,
    seed: int,
    max_steps: int | None = None,
) -> RunResult:
    """Execute ``graph`` from its entry step and record everything; a step that raises ends the
    run FAILED (recorded with the error) and the error propagates."""
    state = dict(state or {})
    max_steps = max_steps or _default_max_steps
    await recorder.record(
        E.RUN_STARTED,
        payload={
            "graph": graph.key,
            "input": normalize_json(agent_input),
            "seed": seed,
            "state_schema_version": graph.state_schema_version,
        },
        step_id="run",
    )
    step_id: str | None = start_step or graph.entry
    steps, output = 0, None
    try:
        while step_id is not None:
            if steps >= max_steps:
                raise StepLimitExceeded(f"{graph.key} exceeded {max_steps} steps")
            recorder.step_id = step_id
            await recorder.record(E.STEP_STARTED, payload={"step": step_id})
            result = await graph.steps[step_id](env, state, agent_input)
            state = result.state
            await recorder.checkpoint(step_id, state, graph.state_schema_version, None)
            await recorder.record(
                E.STEP_COMPLETED,
                payload={"next": result.next, "output": normalize_json(result.output)},
            )
            output = result.output
            step_id = result.next
            steps += 1
    except Exception as exc:
        recorder.step_id = "run"
        await recorder.record(
            E.RUN_FAILED,
            payload={"error": type(exc).__name__, "message": str(exc), "steps": steps},
            durable=True,
        )
        await ledger.finish_run(
            recorder.run_id,
            RunStatus.FAILED,
            recorder.hashing_view({"error": type(exc).__name__, "message": str(exc)}),
        )
        log.warning("run failed", run_id=recorder.run_id, error=type(exc).__name__)
        raise
    recorder.step_id = "run"
    outcome = normalize_json(output)
    # durable before the run reports its end (the write-ahead rule)
    await recorder.record(
        E.RUN_COMPLETED, payload={"outcome": outcome, "steps": steps}, durable=True
    )
    # the run header holds the sanitized outcome, like the RUN_COMPLETED event (rule 17)
    await ledger.finish_run(recorder.run_id, RunStatus.COMPLETED, recorder.hashing_view(outcome))
    log.info("run completed", run_id=recorder.run_id, graph=graph.key, steps=steps)
    return RunResult(recorder.run_id, RunStatus.COMPLETED, outcome, state, steps)


async def migrate_recorded_state(
    graph: GraphDefinition, recorder: RunRecorder, raw_state: State, recorded_schema_version: int
) -> State:
    """The state a step recorded under an older schema, migrated to ``graph``'s schema. The raw
    snapshot, the migrated snapshot and the migration version are all recorded (rule 11)."""
    migrated, migration_version = graph.migrate(raw_state, recorded_schema_version)
    if migration_version is not None:
        await recorder.record(
            E.STATE_MIGRATION,
            payload={
                "raw_state_ref": await recorder.store_json(raw_state),
                "migrated_state_ref": await recorder.store_json(migrated),
                "migration_version": migration_version,
                "graph": graph.key,
            },
        )
    return migrated


async def store_random_state(recorder: RunRecorder, rng: random.Random) -> str:
    version, internal, gauss = rng.getstate()
    return await recorder.store_json({"version": version, "state": list(internal), "gauss": gauss})


async def load_random_state(artifacts: ArtifactStore, ref: str) -> random.Random:
    data = json.loads(await artifacts.get(ref))
    rng = random.Random()
    rng.setstate((data["version"], tuple(data["state"]), data["gauss"]))
    return rng
