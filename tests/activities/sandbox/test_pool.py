"""The sandboxed process kept across a replay's batches: same outputs as a fresh process per
batch, gone when the replay ends, and never outliving a worker killed with SIGKILL."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.sandbox.config import SandboxSettings
from bench.synthetic_replay import SyntheticReplays, next_batch, synthetic_replays
from devstack.temporal_server import start_temporal_dev_server
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, ReplayMode
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayPlan, ReplayWorkflowInput, StepOutput
from runtime.env_values import read_section
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings
from workflows.replay import ReplayWorkflow


async def _replay(replays: SyntheticReplays, runner) -> tuple[str, StepOutput]:
    step = await replays.first_step(3, prefix="replay-pool")
    replay_id = step.plan.replay_id
    while True:
        out = await runner.run_steps(step)
        if out.finished:
            return replay_id, out
        if step.step_index == 0 and runner.settings.jobs_per_process > 1:
            # between batches the process is kept for this replay, and only for it
            assert list(runner.kept) == [replay_id]
        step = next_batch(step, out)


async def _recorded(ledger, replay_id: str) -> list[tuple[str, str, object]]:
    """The replay's events after its header (which names the replay), with each step's
    result: what must not depend on which process ran the steps."""
    loaded = (await ledger.events_with_payloads(replay_id))[1:]
    kept: list[tuple[str, str, object]] = []
    for event, data in loaded:
        payload = json.loads(data or b"null")
        result = (
            (payload["next"], payload["output"])
            if event.type is ExecutionEventType.STEP_COMPLETED
            else None
        )
        kept.append((event.step_id, event.type.value, result))
    return kept


async def test_one_process_serves_a_replays_batches_with_the_same_results(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        stores = replays.stores
        kept = replays.runner(SandboxSettings(warm_processes=0))
        fresh = replays.runner(SandboxSettings(jobs_per_process=1, warm_processes=0))
        try:
            kept_id, kept_out = await _replay(replays, kept)
            fresh_id, fresh_out = await _replay(replays, fresh)
            # 10 steps in batches of 3: 4 batches, one process kept vs one process each
            assert (kept.batches, kept.started) == (4, 1)
            assert (fresh.batches, fresh.started) == (4, 4)
            assert kept.kept == {} and fresh.kept == {}  # the replay finished: nothing kept
            assert kept_out.finished and fresh_out.finished
            # the same final state and positions (content-addressed: same bytes, same digest)
            assert (kept_out.state_ref, kept_out.cursors) == (
                fresh_out.state_ref,
                fresh_out.cursors,
            )
            assert await _recorded(stores.ledger, kept_id) == await _recorded(
                stores.ledger, fresh_id
            )
            assert (await stores.ledger.verify(kept_id)).intact
        finally:
            await kept.aclose()
            await fresh.aclose()


async def test_a_kept_process_is_closed_on_request_and_a_dead_one_replaced(
    tmp_path: Path,
) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        runner = replays.runner(SandboxSettings(warm_processes=0))
        step = await replays.first_step(2, prefix="replay-pool")
        plan = step.plan
        try:
            out = await runner.run_steps(step)
            pid = runner.kept[plan.replay_id]
            # the process dies between batches (a crash, the OOM killer): the next batch
            # transparently gets a new one and the replay goes on where it stood
            os.kill(pid, signal.SIGKILL)
            killed = runner._kept[plan.replay_id]
            await _poll(lambda: not killed.alive, 10, "the killed process still looks alive")
            step = next_batch(step, out)  # from step index 2
            out = await runner.run_steps(step)
            assert out.steps == 2 and out.next_step == "s00004"
            assert runner.started == 2 and runner.kept[plan.replay_id] != pid
            await runner.close(plan.replay_id)  # the replay was canceled: close_replay_run
            assert runner.kept == {}
        finally:
            await runner.aclose()


def _sandbox_processes(uid: int) -> list[str]:
    """Every process of the sandboxes that use ``uid``: the bwraps (root, named by the uid
    they switch to) and whatever runs under the uid."""
    listing = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,uid=,args="], capture_output=True, text=True, check=True
    ).stdout
    found = []
    for line in listing.splitlines():
        _pid, owner, args = line.split(None, 2)
        if int(owner) == uid or f"--reuid={uid} " in args:
            found.append(line.strip()[:160])
    return found


async def _poll(predicate, deadline_s: float, what: str):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} within {deadline_s} s")


def _start_worker(home: Path, address: str, uid: int) -> subprocess.Popen[bytes]:
    with open(home / "worker.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "worker", "--queue", "all"],
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")},
                "REPLAYBOOK_HOME": str(home),
                "REPLAYBOOK_LOG_FORMAT": "json",
                "REPLAYBOOK_SANDBOX_UID": str(uid),
                "TEMPORAL_ADDRESS": address,
            },
            stdout=log,
            stderr=log,
            start_new_session=True,
        )


async def test_no_sandboxed_process_outlives_a_worker_killed_with_sigkill(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    uid = 300000 + (os.getpid() % 1000) * 64  # a uid no other sandbox of this machine uses
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    worker = _start_worker(home, server.address, uid)
    try:
        settings = stack_settings(home, server.address)
        async with open_stores(settings.stores) as stores:
            source = await record_synthetic_run(stores.ledger, stores.artifacts, 1000)
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            plan = ReplayPlan(
                replay_id=f"replay-orphan-{uuid.uuid4().hex[:10]}",
                source_run_id=source.run_id,
                mode=ReplayMode.RECORDED,
                steps_per_activity=1,
            )
            await client.start_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=plan),
                id=plan.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            # mid-replay: the worker's sandbox (bwrap, its init, the step process) is up
            running = await _poll(
                lambda: _sandbox_processes(uid) if len(_sandbox_processes(uid)) >= 3 else None,
                60,
                "the sandbox did not appear",
            )
            events = await stores.ledger.events(plan.replay_id)
            steps = sum(1 for e in events if e.type is ExecutionEventType.STEP_COMPLETED)
            assert steps < 1000, "the replay finished before the worker could be killed"
            os.killpg(worker.pid, signal.SIGKILL)  # the worker's group: not the sandboxes'
            worker.wait(timeout=30)
            await _poll(
                lambda: not _sandbox_processes(uid),
                15,
                f"sandboxed processes outlived the worker: {_sandbox_processes(uid)} "
                f"(before the kill: {running})",
            )
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=30)
        server.stop(timeout=20)


def test_settings_read_the_pool_limits() -> None:
    settings = read_section(
        SandboxSettings,
        {"REPLAYBOOK_SANDBOX_IDLE_SECONDS": "5", "REPLAYBOOK_SANDBOX_JOBS_PER_PROCESS": "1"},
    )
    assert (settings.idle_seconds, settings.jobs_per_process) == (5, 1)
