"""Replaying runs whose recorded code is hostile, through the real Temporal dev server and a
replay worker with the default sandbox (rule 16: historical code is untrusted input)."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from pathlib import Path

from prometheus_client import REGISTRY

from examples.coding_agent import record_coding_run
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, ReplayMode, ReplayStatus, RunStatus
from models.replay_flow import ReplayPlan

PROJECT = Path(__file__).resolve().parents[3]


def plan(run_id: str) -> ReplayPlan:
    return ReplayPlan(
        replay_id=f"replay-sbx-{uuid.uuid4().hex[:10]}",
        source_run_id=run_id,
        mode=ReplayMode.RECORDED,
    )


class Listener:
    """A host loopback port that is really listening, counting connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


async def replay_output(stack, run_id: str):
    """Replay ``run_id``; the outcome and the replayed step's recorded output and isolation."""
    p = plan(run_id)
    outcome = await stack.replay(p)
    loaded = await stack.stores.ledger.events_with_payloads(
        p.replay_id,
        types=frozenset({ExecutionEventType.STEP_STARTED, ExecutionEventType.STEP_COMPLETED}),
    )
    payloads = {e.type: json.loads(data or b"{}") for e, data in loaded}
    return outcome, payloads


async def test_hostile_recorded_code_is_contained_reported_and_the_worker_survives(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    listener = Listener()
    escape = PROJECT / "examples" / f"escaped-{uuid.uuid4().hex[:8]}.txt"
    attempts = {
        "socket": (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {listener.port}), timeout=3)\n"
            "print('connected')"
        ),
        "shadow": "print(open('/etc/shadow').read())",
        "write": f"open({str(escape)!r}, 'w').write('escaped')",
        "fork_bomb": "import os\nwhile True:\n    os.fork()",
        "allocate_10gb": "block = bytearray(10 * 1024**3)\nprint(len(block))",
        # issue 31 item 7: no new user namespace, by the system call or by the tool
        "userns": (
            "import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "if libc.unshare(0x10000000) != 0:\n"
            "    raise PermissionError(os.strerror(ctypes.get_errno()))\n"
            "print('in a new user namespace')"
        ),
        "userns_tool": "import subprocess\nsubprocess.run(['unshare', '-U', 'true'], check=True)",
    }
    expected_error = {
        "socket": "ConnectionRefusedError",
        "shadow": "FileNotFoundError",
        "write": "Read-only file system",  # the code is visible, read-only
        "fork_bomb": "BlockingIOError",
        "allocate_10gb": "MemoryError",
        "userns": "PermissionError: Operation not permitted",
        "userns_tool": "unshare failed: Operation not permitted",
    }
    for name, code in attempts.items():
        # recorded as production's own sandbox reported it: the code is not run here
        source = await record_coding_run(stack.stores.ledger, stack.stores.artifacts, code)
        outcome, payloads = await replay_output(stack, source.run_id)
        assert outcome.status is ReplayStatus.COMPLETED, (name, outcome.reason)
        started = payloads[ExecutionEventType.STEP_STARTED]
        assert started["isolation"] == "bubblewrap", name
        # and the replay's outcome says so too (status, API view, incident reports)
        assert outcome.isolation == "bubblewrap", (name, outcome.isolation)
        result = payloads[ExecutionEventType.STEP_COMPLETED]["output"]
        # the attempt is reported in the replay: it failed, and the error says why
        assert result["exit_code"] not in (0, None), (name, result)
        assert expected_error[name] in result["stderr"], (name, result)
        # and the difference from what production reported is visible in the comparison
        assert outcome.comparison is not None and not outcome.comparison.same_outcome, name
    assert listener.accepted == 0, "sandboxed code reached a port on the host's loopback"
    assert not escape.exists(), "sandboxed code wrote outside its temporary directory"

    # the worker survived all of it: an ordinary replay still runs and reproduces
    ordinary = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    outcome, payloads = await replay_output(stack, ordinary.run_id)
    assert outcome.status is ReplayStatus.COMPLETED and outcome.reproduced, outcome.reason
    assert outcome.steps_executed == 10


async def test_a_step_process_killed_by_its_own_code_fails_the_replay_with_the_reason(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    # inline: the generated code runs in the step's own process and kills it
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"
    source = await record_coding_run(
        stack.stores.ledger, stack.stores.artifacts, code, runner="inline"
    )
    failed = {"mode": "RECORDED", "result": "failed"}
    failed_before = REGISTRY.get_sample_value("agent_replay_total", failed) or 0.0
    outcome, _ = await replay_output(stack, source.run_id)
    assert outcome.status is ReplayStatus.FAILED
    # the failure is counted (the workers run in this process) and the replay's run is closed
    assert (REGISTRY.get_sample_value("agent_replay_total", failed) or 0.0) == failed_before + 1
    closed = await stack.stores.ledger.get_run(outcome.replay_id)
    assert closed.status is RunStatus.FAILED
    assert "SandboxedStepFailedError" in (outcome.reason or "") or "killed" in (
        outcome.reason or ""
    ), outcome.reason
    assert "SIGKILL" in (outcome.reason or ""), outcome.reason

    # inline allocation of 10 GB: refused by the address-space limit inside the step process
    source = await record_coding_run(
        stack.stores.ledger,
        stack.stores.artifacts,
        "block = bytearray(10 * 1024**3)",
        runner="inline",
    )
    outcome, payloads = await replay_output(stack, source.run_id)
    assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
    assert "MemoryError" in payloads[ExecutionEventType.STEP_COMPLETED]["output"]["error"]

    ordinary = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    outcome, _ = await replay_output(stack, ordinary.run_id)
    assert outcome.status is ReplayStatus.COMPLETED and outcome.reproduced


async def test_a_step_past_the_replays_time_limit_is_stopped_and_inconclusive(
    sandbox_stack,
) -> None:
    """Issue 31 item 7: ``--max-duration`` holds inside a step. The recorded code sleeps far
    past the replay's limit; the worker stops its sandboxed process at the deadline, records
    why, and the replay ends INCONCLUSIVE (BUDGET) with a partial result, never a verdict."""
    from datetime import timedelta

    from models.enums import InconclusiveReason, ReplayVerdict
    from models.replay import ReplayBudget

    stack = sandbox_stack
    code = "import time\ntime.sleep(600)\nprint('woke up')"
    source = await record_coding_run(
        stack.stores.ledger, stack.stores.artifacts, code, runner="inline"
    )
    p = plan(source.run_id).model_copy(
        update={"budget": ReplayBudget(max_duration=timedelta(seconds=10))}
    )
    outcome = await stack.replay(p)
    assert outcome.status is ReplayStatus.COMPLETED and outcome.partial, outcome
    assert outcome.verdict is ReplayVerdict.INCONCLUSIVE, outcome
    assert outcome.inconclusive_reason is InconclusiveReason.BUDGET, outcome
    assert "max_duration 10s reached inside step run_generated_code" in (outcome.reason or "")
    assert "stopped after" in (outcome.verdict_reason or ""), outcome.verdict_reason
    assert outcome.reproduced is None
    loaded = await stack.stores.ledger.events_with_payloads(p.replay_id)
    types = [e.type for e, _ in loaded]
    assert ExecutionEventType.STEP_COMPLETED not in types, types  # it never woke up
    (failed,) = [
        json.loads(d or b"{}") for e, d in loaded if e.type is ExecutionEventType.RUN_FAILED
    ]
    assert failed["error"] == "budget" and failed["partial"] is True, failed
    assert (await stack.stores.ledger.get_run(p.replay_id)).status is RunStatus.FAILED
