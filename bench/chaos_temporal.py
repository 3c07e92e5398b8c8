"""Fault injection on the Temporal side: a worker SIGKILLed during a ``--repeat`` replay or an
incident (a new worker takes over), and the Temporal dev server SIGKILLed and restarted on its
own database (the running worker reconnects). Used by ``tests/chaos`` (one trial each) and
``python -m bench.chaos`` (more).

Each scenario has a Temporal dev server and a ``python -m worker --queue all`` process of its
own (SQLite stores under the scenario's directory). Progress is the number of ledger events:
nothing but the worker writes while a trial runs, so the first new event after the kill is the
moment work resumed; the seconds from the kill to that moment are the time lost (a new worker
starting included). Kill points differ from trial to trial (after 20, 35, 50… new events of a replay, 5, 12,
19, 26 of an incident). The scenarios share a stack (``running_stack``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from bench.chaos_row import Row
from devstack.temporal_server import TemporalDevServer, start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, ReplayMode, ReplayStatus, SideEffectRecord
from models import SideEffectStatus as S
from models.incident_flow import IncidentPhase, IncidentRequest, IncidentView
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import Stores, open_stores
from stores.sql import schema
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings
from workflows.incident import IncidentWorkflow
from workflows.replay import ReplayWorkflow

#: steps of the synthetic run a ``--repeat`` replay replays (a registered length), its repeats
STEPS, REPEAT = 200, 2
#: a trial that has not finished by then failed
DEADLINE_S = 240.0


class Stack:
    """A Temporal dev server and one worker process over SQLite stores under ``home``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.server: TemporalDevServer = start_temporal_dev_server(root / "temporal", headless=True)
        self.worker: subprocess.Popen[bytes] | None = None

    @property
    def env(self) -> dict[str, str]:
        return {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("REPLAYBOOK_", "TEMPORAL_", "AWS_"))
        } | {
            "REPLAYBOOK_HOME": str(self.home),
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_LOCAL_MODELS": "off",
            "TEMPORAL_ADDRESS": self.server.address,
        }

    @property
    def settings(self) -> Settings:
        return Settings.from_env(self.env)

    def start_worker(self) -> None:
        log = (self.root / f"worker-{uuid.uuid4().hex[:6]}.log").open("wb")
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "worker", "--queue", "all"],
            env=self.env,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its sandboxed children die with it (killpg)
        )

    def kill_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(timeout=30)

    def kill_server(self) -> None:
        """SIGKILL the dev server (no chance to flush or say goodbye)."""
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait(timeout=30)

    def restart_server(self) -> None:
        """The server again, on its database and front-end port (workers and clients reconnect)."""
        port = self.server.port
        self.server = start_temporal_dev_server(self.root / "temporal", port=port, headless=True)

    async def client(self) -> Client:
        return await Client.connect(self.server.address, data_converter=pydantic_data_converter)

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait(timeout=30)
        if self.server.running():
            self.server.stop(timeout=20)


@contextlib.asynccontextmanager
async def running_stack(root: Path) -> AsyncIterator[Stack]:
    """A stack with its worker started; everything of it stopped on exit."""
    stack = await asyncio.to_thread(Stack, root)
    try:
        stack.start_worker()
        yield stack
    finally:
        await asyncio.to_thread(stack.close)


async def event_count(stores: Stores) -> int:
    async with stores.db.read() as conn:
        return int(
            (
                await conn.execute(select(func.count()).select_from(schema.execution_events))
            ).scalar_one()
        )


async def wait_events(stores: Stores, at_least: int, deadline_s: float = DEADLINE_S) -> int:
    """Poll until the ledger holds ``at_least`` events; returns the count."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        count = await event_count(stores)
        if count >= at_least:
            return count
        await asyncio.sleep(0.05)
    raise AssertionError(f"the ledger did not reach {at_least} events in {deadline_s:g} s")


async def _history_length(handle: WorkflowHandle[Any, Any]) -> int:
    return int((await handle.describe()).raw_description.workflow_execution_info.history_length)


async def _history_beyond(handle: WorkflowHandle[Any, Any], length: int) -> int:
    """Poll until the workflow's history is longer than ``length``; returns its length."""
    while True:
        now = await _history_length(handle)
        if now > length:
            return now
        await asyncio.sleep(0.05)


async def _kill_and_resume(
    stack: Stack, stores: Stores, kill_after: int, fault: str, workflow_id: str
) -> float:
    """Once ``kill_after`` more events are recorded, inject ``fault`` and recover; returns
    the seconds from the fault to the first event recorded after it (after the restarted
    server answers, for ``temporal``), or to the workflow's end if it records nothing more."""
    await wait_events(stores, await event_count(stores) + kill_after)
    if fault == "worker":
        stack.kill_worker()
        killed_at, before = time.monotonic(), await event_count(stores)
        handle = (await stack.client()).get_workflow_handle(workflow_id)
        steps = await _history_length(handle)  # no worker: nothing of ours moves it now
        stack.start_worker()
    else:
        stack.kill_server()
        killed_at = time.monotonic()
        await asyncio.to_thread(stack.restart_server)
        # activities already running go on writing while the server is down: what counts is
        # the first event once it is back
        before = await event_count(stores)
        handle = (await stack.client()).get_workflow_handle(workflow_id)
        steps = await _history_length(handle)
    waits = [
        asyncio.ensure_future(wait_events(stores, before + 1)),
        asyncio.ensure_future(handle.result()),
        # an incident whose remaining work was recorded before the fault records nothing
        # more: its history moving on (to AWAITING_CONFIRMATION, say) is its recovery
        asyncio.ensure_future(_history_beyond(handle, steps)),
    ]
    done, pending = await asyncio.wait(
        waits, timeout=DEADLINE_S, return_when=asyncio.FIRST_COMPLETED
    )
    for waiting in pending:
        waiting.cancel()
    if not done:
        raise AssertionError(f"{workflow_id}: nothing happened {DEADLINE_S:g} s after the fault")
    for finished in done:
        finished.result()  # a failed workflow fails the trial here
    return time.monotonic() - killed_at


async def _steps_check(stores: Stores, replay_ids: list[str]) -> tuple[int, int, int]:
    """(steps missing, steps recorded twice, chains intact) over ``replay_ids``."""
    missing = duplicated = intact = 0
    for replay_id in replay_ids:
        events = await stores.ledger.events(replay_id)
        started = Counter(e.step_id for e in events if e.type is ExecutionEventType.STEP_STARTED)
        steps = {f"s{i:05d}" for i in range(STEPS)}
        missing += len(steps - set(started))
        duplicated += sum(n - 1 for n in started.values() if n > 1)
        intact += (await stores.ledger.verify(replay_id)).intact
    return missing, duplicated, intact


async def replays_under_fault(stack: Stack, trials: int, fault: str = "worker") -> Row:
    """``trials`` replays with ``--repeat`` (``REPEAT`` children of a ``STEPS``-step run), each
    with one fault (``worker``: SIGKILL and a new worker; ``temporal``: SIGKILL of the dev
    server and a restart) at a different point."""
    row = Row(f"kill {fault} mid-replay --repeat {REPEAT}")
    async with open_stores(stack.settings.stores) as stores:
        source = await record_synthetic_run(stores.ledger, stores.artifacts, STEPS)
        for trial in range(trials):
            plan = ReplayPlan(
                replay_id=f"chaos-{uuid.uuid4().hex[:8]}",
                source_run_id=source.run_id,
                mode=ReplayMode.RECORDED,
                repeat=REPEAT,
            )
            client = await stack.client()
            await client.start_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=plan),
                id=plan.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            row.tried += 1
            row.lost_seconds.append(
                await _kill_and_resume(stack, stores, 20 + 15 * (trial % 6), fault, plan.replay_id)
            )
            client = await stack.client()  # the server may have restarted
            handle = client.get_workflow_handle(plan.replay_id, result_type=ReplayOutcome)
            outcome = await asyncio.wait_for(handle.result(), timeout=DEADLINE_S)
            children = [f"{plan.replay_id}-{i:03d}" for i in range(REPEAT)]
            missing, duplicated, intact = await _steps_check(stores, children)
            row.completed += outcome.status is ReplayStatus.COMPLETED and not missing
            row.lost += missing
            row.duplicated += duplicated
            row.intact += intact == REPEAT
    return row


async def incidents_under_fault(stack: Stack, trials: int) -> Row:
    """``trials`` incidents (refund lost in flight: freeze, reconcile, two exact replays), each
    with the worker SIGKILLed at a different point and a new one started. Completed: the
    incident reached AWAITING_CONFIRMATION (all it does without a human) with the refund
    reconciled; left EXECUTING: the source run's side effects still EXECUTING."""
    row = Row("kill worker mid-incident")
    async with open_stores(stack.settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        for trial in range(trials):
            source = await run_scenario(
                world, stores.ledger, stores.artifacts, "refund-timeout", seed=trial
            )
            refunds = await world.call_count("payments", "refund")
            request = IncidentRequest(
                incident_id=f"INC-chaos-{uuid.uuid4().hex[:8]}",
                source_run_id=source.run_id,
                repeat=2,
            )
            client = await stack.client()
            handle: WorkflowHandle = await client.start_workflow(
                IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
            )
            row.tried += 1
            row.lost_seconds.append(
                await _kill_and_resume(
                    stack, stores, 5 + 7 * (trial % 4), "worker", request.incident_id
                )
            )
            view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
            effects: list[SideEffectRecord] = await stores.evidence.records(
                SideEffectRecord, source.run_id
            )
            reconciled = bool(effects) and all(e.status is S.RECONCILED for e in effects)
            row.left_executing += sum(e.status is S.EXECUTING for e in effects)
            # the replays run with writes blocked: a refund the provider saw again is a
            # duplicated side effect
            row.duplicated += await world.call_count("payments", "refund") - refunds
            runs = view.replays[0].runs or 0 if view.replays else 0
            row.lost += max(0, 2 - runs)
            row.completed += (
                view.phase is IncidentPhase.AWAITING_CONFIRMATION and reconciled and runs == 2
            )
            checked = [source.run_id] + [
                f"{view.replays[0].replay_id}-{i:03d}" for i in range(runs)
            ]
            row.intact += all([(await stores.ledger.verify(r)).intact for r in checked])
            await handle.terminate("chaos trial done")
    return row


async def wait_phase(
    handle: WorkflowHandle, phase: IncidentPhase, deadline_s: float = DEADLINE_S
) -> IncidentView:
    deadline = time.monotonic() + deadline_s
    view: IncidentView | None = None
    while time.monotonic() < deadline:
        view = await handle.query("status", result_type=IncidentView)
        if view is not None and view.phase in (phase, IncidentPhase.FAILED):
            return view
        await asyncio.sleep(0.2)
    raise AssertionError(f"incident did not reach {phase} in {deadline_s:g} s (last: {view})")
