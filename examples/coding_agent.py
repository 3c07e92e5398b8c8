"""A minimal coding agent whose step runs generated code — untrusted input on replay (rule 16).

Graph ``coding-agent`` version ``1``: step ``run_generated_code`` takes the code the run was
given (recorded in RUN_STARTED, i.e. historical evidence) and runs it, as a coding agent's
"run the generated code" step does, reporting exit status and output tails. ``runner`` in
the input picks ``subprocess`` (a child Python, the default) or ``inline`` (``exec`` in the
step's own process). No model calls, no tools.

The executor is a parameter of the graph so that a recording can be made without running the
code (``production_sandbox_stand_in``): recording hostile code for tests must not execute it
on the test machine. Replay always uses ``run_code``, i.e. executes it for real — in the
replay sandbox.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from examples.model_free import allow_all_policies, model_free_catalog, model_free_spec
from examples.synthetic import PROFILE  # the model profile its runs have always pinned
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.executor import RunResult
from runtime.graph import GraphDefinition, GraphRegistry, State, StepResult
from runtime.ports import ArtifactStore, EventLedger
from runtime.replay.catalog import AgentCatalog
from runtime.session import AgentSpec, record_run

GRAPH_ID = "coding-agent"
VERSION = "1"
#: seconds the generated code may run (wall clock) before it is killed
CODE_TIMEOUT = 20.0
TAIL = 600

CAPABILITIES = CapabilityRegistry("coding-agent-1", [])
POLICIES = allow_all_policies("coding")

Executor = Callable[[str, str], Awaitable[dict[str, Any]]]


async def run_code(code: str, runner: str) -> dict[str, Any]:
    """Execute ``code`` and describe what happened (never raises for the code's failures)."""
    if runner == "inline":
        try:
            exec(compile(code, "<generated>", "exec"), {"__name__": "__generated__"})
        except Exception as exc:  # the agent reports the code's failure
            return {"runner": runner, "exit_code": 1, "error": f"{type(exc).__name__}: {exc}"}
        return {"runner": runner, "exit_code": 0, "error": None}
    return await asyncio.to_thread(_subprocess, code)


def _subprocess(code: str) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", code],
            capture_output=True,
            timeout=CODE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"runner": "subprocess", "exit_code": None, "timed_out": True}
    except OSError as exc:  # could not even start it (e.g. no process slot left)
        return {"runner": "subprocess", "exit_code": None, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "runner": "subprocess",
        "exit_code": done.returncode,
        "stdout": done.stdout.decode(errors="replace")[-TAIL:],
        "stderr": done.stderr.decode(errors="replace")[-TAIL:],
    }


async def production_sandbox_stand_in(code: str, runner: str) -> dict[str, Any]:
    """What the recording says production's own sandbox reported; the code is not run."""
    return {"runner": runner, "exit_code": 0, "note": "ran in production's sandbox"}


def coding_graph(execute: Executor = run_code) -> GraphDefinition:
    async def run_generated_code(
        env: AgentEnvironment, state: State, agent_input: Any
    ) -> StepResult:
        code = str(agent_input.get("code", ""))
        result = await execute(code, str(agent_input.get("runner", "subprocess")))
        return StepResult({"ran": True}, None, result)

    return GraphDefinition(
        graph_id=GRAPH_ID,
        version=VERSION,
        entry="run_generated_code",
        steps={"run_generated_code": run_generated_code},
        description="runs the code it was given (untrusted on replay)",
    )


GRAPHS = GraphRegistry()
GRAPHS.register(coding_graph())


def coding_spec(execute: Executor = run_code) -> AgentSpec:
    return model_free_spec(PROFILE, coding_graph(execute), CAPABILITIES, POLICIES, {})


async def record_coding_run(
    ledger: EventLedger,
    artifacts: ArtifactStore,
    code: str,
    runner: str = "subprocess",
    execute: Executor = production_sandbox_stand_in,
    run_id: str | None = None,
) -> RunResult:
    return await record_run(
        coding_spec(execute),
        ledger,
        artifacts,
        run_id=run_id or f"run-coding-{uuid.uuid4().hex[:10]}",
        agent_input={"task": "run the generated code", "code": code, "runner": runner},
        seed=0,
        labels={"agent": GRAPH_ID},
    )


def coding_catalog() -> AgentCatalog:
    return model_free_catalog(PROFILE, GRAPH_ID, GRAPHS, CAPABILITIES, POLICIES, {})
