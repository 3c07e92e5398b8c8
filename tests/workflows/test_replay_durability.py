"""Durability: a replay survives its worker being killed and the Temporal server restarting,
and no step is recorded twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, ReplayMode, ReplayStatus
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings
from workflows.replay import ReplayWorkflow

STEPS = 200


def start_worker(home: Path, address: str) -> subprocess.Popen[bytes]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")},
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        "TEMPORAL_ADDRESS": address,
    }
    log = open(home / f"worker-{uuid.uuid4().hex[:6]}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "--queue", "all"],
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if process.poll() is None:
        os.killpg(process.pid, sig)
        process.wait(timeout=30)


async def steps_recorded(stores, replay_id: str) -> int:
    try:
        events = await stores.ledger.events(replay_id)
    except Exception:
        return 0
    return sum(1 for e in events if e.type is ExecutionEventType.STEP_COMPLETED)


async def wait_for_steps(stores, replay_id: str, at_least: int, deadline_s: float = 60) -> int:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        done = await steps_recorded(stores, replay_id)
        if done >= at_least:
            return done
        await asyncio.sleep(0.05)
    raise AssertionError(f"replay {replay_id} did not reach {at_least} steps in {deadline_s}s")


async def assert_each_step_once(stores, replay_id: str) -> None:
    events = await stores.ledger.events(replay_id)
    started = Counter(e.step_id for e in events if e.type is ExecutionEventType.STEP_STARTED)
    assert set(started) == {f"s{i:05d}" for i in range(STEPS)}
    assert max(started.values()) == 1, [s for s, n in started.items() if n > 1]
    assert (await stores.ledger.verify(replay_id)).intact


@pytest.mark.parametrize("disruption", ["kill-worker", "restart-temporal"])
async def test_a_replay_survives(disruption: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    workers: list[subprocess.Popen[bytes]] = []
    try:
        settings = stack_settings(home, server.address)
        async with open_stores(settings.stores) as stores:
            source = await record_synthetic_run(stores.ledger, stores.artifacts, STEPS)
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            plan = ReplayPlan(
                replay_id=f"replay-{uuid.uuid4().hex[:10]}",
                source_run_id=source.run_id,
                mode=ReplayMode.RECORDED,
            )
            workers.append(start_worker(home, server.address))
            handle = await client.start_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=plan),
                id=plan.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            await wait_for_steps(stores, plan.replay_id, 20)
            if disruption == "kill-worker":
                stop(workers[-1])  # mid-replay, without warning
                done = await steps_recorded(stores, plan.replay_id)
                assert done < STEPS
                workers.append(start_worker(home, server.address))
            else:
                port, ui_port = server.port, server.ui_port
                server.stop(timeout=20)
                done = await steps_recorded(stores, plan.replay_id)
                assert done < STEPS
                server = start_temporal_dev_server(
                    tmp_path / "temporal", port=port, ui_port=ui_port, headless=True
                )
                client = await Client.connect(
                    server.address, data_converter=pydantic_data_converter
                )
                handle = client.get_workflow_handle(plan.replay_id, result_type=ReplayOutcome)
            outcome: ReplayOutcome = await asyncio.wait_for(handle.result(), timeout=240)
            assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
            assert outcome.steps_executed == STEPS and outcome.reproduced
            await assert_each_step_once(stores, plan.replay_id)
    finally:
        for process in workers:
            stop(process)
        server.stop(timeout=20)
