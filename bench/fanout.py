"""Benchmark: incident fan-out. Run with ``.venv/bin/python -m bench --only fanout`` (or
``python -m bench.fanout [repeat] [rounds]``).

An incident on a support-desk wrong-customer run with the exact replay and two counterfactuals
(``prompt=v18``, ``prompt=v17``), each ``repeat`` times (20: 60 child replays, 20 of them at
once during COUNTERFACTUALS), run to AWAITING_CONFIRMATION through a real Temporal dev server
with the workers in this process (SQLite stores in a temporary directory). Two worker
configurations in interleaved rounds, each with its own fresh workers:

* ``old``: what a replay worker did before issue 35 — one warm sandbox process, refilled one
  at a time, nothing started for the incident's fan-out, a process per replay;
* ``pool`` (only when asked for: ``python -m bench.fanout 20 3 old,pool,new``): a process per
  replay, the pool filled to the fan-out when a replay fans out (``SandboxedSteps.expect``);
* ``new``: today's defaults — the sibling replays of a fan-out take turns in a few processes
  of their group (``REPLAYBOOK_SANDBOX_FANOUT_SHARE``), started when the fan-out is announced.

Figures: the first step batch of each child replay, from its ``replay_step`` activity being
scheduled to its completion (Temporal's own event times; split into the wait for a worker
slot, scheduled → started, and the run, started → completed), as p50 / p95 / max over all the
children of a round, the median of the rounds; and the incident's total (start to
AWAITING_CONFIRMATION), median of the rounds with its spread.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.common import Row, Spread, emit, machine_load
from bench.stack import BenchStack, bench_stack
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.incident_flow import Counterfactual, IncidentPhase, IncidentRequest, IncidentView
from models.queues import CONTROL_QUEUE
from stores.sql.support_desk_world import SqlWorldStore
from worker.logs import configure_logging
from worker.settings import Settings
from workflows.incident import IncidentWorkflow

REPEAT = 20
ROUNDS = 3
FIRST_BATCH_GOAL_S = 0.5
INCIDENT_GOAL_S = 45.0
DEADLINE_S = 600.0
COUNTERFACTUALS = (
    Counterfactual(kind="prompt", value="v18"),
    Counterfactual(kind="prompt", value="v17"),
)

#: each configuration: the sandbox settings' changes and whether a fan-out fills the pool
CONFIGS: dict[str, dict[str, Any]] = {
    "old": {"warm_processes": 1, "fanout_warm": 0, "fanout_share": 0},
    "pool": {"fanout_share": 0},
    "new": {},
}


def _configured(settings: Settings, name: str) -> Settings:
    sandbox = settings.sandbox.model_copy(update=CONFIGS[name])
    return settings.model_copy(update={"sandbox": sandbox})


async def _first_batches(client: Client, workflow_ids: list[str]) -> list[tuple[float, float]]:
    """(wait, run) seconds of each workflow's first ``replay_step`` activity."""
    out = []
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        scheduled = started = None
        for event in history.events:
            if (
                scheduled is None
                and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and event.activity_task_scheduled_event_attributes.activity_type.name
                == "replay_step"
            ):
                scheduled = event
            elif (
                scheduled is not None
                and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and event.activity_task_started_event_attributes.scheduled_event_id
                == scheduled.event_id
            ):
                started = event
            elif (
                started is not None
                and event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and event.activity_task_completed_event_attributes.scheduled_event_id
                == scheduled.event_id  # type: ignore[union-attr]
            ):
                at = scheduled.event_time.ToDatetime()  # type: ignore[union-attr]
                began = started.event_time.ToDatetime()
                done = event.event_time.ToDatetime()
                out.append(((began - at).total_seconds(), (done - began).total_seconds()))
                break
    return out


async def _incident(
    stack: BenchStack, settings: Settings, run_id: str, repeat: int
) -> tuple[float, list[tuple[float, float]]]:
    request = IncidentRequest(
        incident_id=f"INC-fanout-{uuid.uuid4().hex[:8]}",
        source_run_id=run_id,
        counterfactuals=COUNTERFACTUALS,
        repeat=repeat,
    )
    client = stack.client
    async with stack.workers(settings):
        # the worker has been up a moment (its warm processes started) before the alert
        await asyncio.sleep(3.0)
        started = time.perf_counter()
        handle = await client.start_workflow(
            IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
        )
        deadline = time.monotonic() + DEADLINE_S
        while True:
            view = await handle.query("status", result_type=IncidentView)
            if view is not None and view.phase is IncidentPhase.FAILED:
                raise AssertionError(f"incident failed: {view.error}")
            if view is not None and view.phase is IncidentPhase.AWAITING_CONFIRMATION:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"incident not done in {DEADLINE_S:g} s: {view}")
            await asyncio.sleep(0.1)
        total = time.perf_counter() - started
        await handle.terminate("benchmark done")
    children = [
        f"{request.incident_id}-{suffix}-{i:03d}"
        for suffix in ("exact", "cf1", "cf2")
        for i in range(repeat)
    ]
    return total, await _first_batches(client, children)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _run(repeat: int, rounds: int, configs: tuple[str, ...]) -> dict[str, Any]:
    results: dict[str, dict[str, list[Any]]] = {
        name: {"total": [], "p50": [], "p95": [], "max": [], "wait_p50": [], "loads": []}
        for name in configs
    }
    async with bench_stack({"REPLAYBOOK_LOCAL_MODELS": "off"}) as stack:
        world = SimulatedWorld(SqlWorldStore.beside(stack.stores.db.engine.url))
        await world.ensure()
        source = await run_scenario(
            world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=0
        )
        for index in range(rounds):
            order = configs if index % 2 == 0 else tuple(reversed(configs))
            for name in order:
                total, batches = await _incident(
                    stack, _configured(stack.settings, name), source.run_id, repeat
                )
                whole = [w + r for w, r in batches]
                got = results[name]
                got["total"].append(total)
                got["p50"].append(_pct(whole, 0.5))
                got["p95"].append(_pct(whole, 0.95))
                got["max"].append(max(whole))
                got["wait_p50"].append(_pct([w for w, _ in batches], 0.5))
                got["loads"].append(machine_load())
                print(
                    f"round {index + 1} {name}: incident {total:.1f} s, first batch "
                    f"p50 {got['p50'][-1]:.2f} s p95 {got['p95'][-1]:.2f} s max "
                    f"{got['max'][-1]:.2f} s (wait for a slot p50 {got['wait_p50'][-1]:.2f}"
                    f" s) over {len(batches)} children, {machine_load()}",
                    flush=True,
                )
    return results


def main(
    repeat: int = REPEAT, rounds: int = ROUNDS, configs: tuple[str, ...] = ("old", "new")
) -> Any:
    configure_logging("json", logging.WARNING)  # a line per child replay otherwise
    r = asyncio.run(_run(repeat, rounds, configs))
    median: Callable[[list[float]], float] = statistics.median
    new, old = r.get("new"), r.get("old")
    if new is None or old is None:
        return r
    emit(
        Row(
            figure=f"incident fan-out: a child's first batch, scheduled to completed "
            f"({3 * repeat} children, {2 * min(repeat, 10)} at once), p50 / p95 / max",
            value=f"{median(new['p50']):.2f} / {median(new['p95']):.2f} / "
            f"{median(new['max']):.2f} s",
            baseline=f"before issue 35 (1 warm process) {median(old['p50']):.2f} / "
            f"{median(old['p95']):.2f} / {median(old['max']):.2f} s",
            ratio=median(old["p95"]) / median(new["p95"]),
            goal=f"<= {FIRST_BATCH_GOAL_S:g} s",
            met=median(new["max"]) <= FIRST_BATCH_GOAL_S,
            load="; ".join(new["loads"]),
        )
    )
    total, before = Spread.of(new["total"]), Spread.of(old["total"])
    emit(
        Row(
            figure=f"incident, exact + 2 counterfactuals x {repeat}, to AWAITING_CONFIRMATION",
            value=total.text(1, "s", 1),
            baseline=f"before issue 35 {before.text(1, 's', 1)}",
            ratio=before.median / total.median,
            goal=f"<= {INCIDENT_GOAL_S:g} s",
            met=total.median <= INCIDENT_GOAL_S,
            load="; ".join(old["loads"]),
        )
    )
    return r


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:3]] + [REPEAT, ROUNDS][len(sys.argv[1:3]) :]
    names = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("old", "new")
    main(sizes[0], sizes[1], names)
