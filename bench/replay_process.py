"""``python -m bench.replay_process HOME RUN_ID``: replay a recorded synthetic run as a replay
worker does, in a fresh process, and print what it cost as one JSON line.

The process does only what a worker does for one replay: prepare (chain verification,
completeness, the replay's header), every batch of steps through the sandbox runner (bubblewrap
unless ``--unsandboxed``), then the comparison of the two trajectories. Its peak RSS is the
worker's for that replay alone (``bench.bench_source`` records the run in another process).
Both peaks are read from ``/proc`` (``VmHWM``; see ``_peak_mb`` for why not ``ru_maxrss``).
The sandboxed processes' peak is read from ``/proc`` (their ``VmHWM``, sampled while they
live): ``RUSAGE_CHILDREN`` would not do, a child forked from the worker counts the worker's
pages as its own until it execs, and bubblewrap does not pass its children's usage up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from activities.sandbox.config import SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from bench.stack import bench_settings
from bench.synthetic_replay import next_batch
from models import ReplayMode
from models.comparison import compare_trajectories, reproduces
from models.replay_flow import ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from runtime.trajectory import load_trajectory
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.catalogs import catalogs
from worker.settings import Settings
from worker.temporal import CATALOG_FACTORY


def settings_for(home: Path) -> Settings:
    """The settings of a bench home (its SQLite ledger and artifacts)."""
    return bench_settings(home)


def _peak_mb() -> float:
    """This process's peak RSS: ``VmHWM``, the high-water mark of its own address space. Not
    ``ru_maxrss``: Linux keeps that across ``exec``, so a process started from a large parent
    (``python -m bench``, after the benches before this one) would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


class SandboxPeak(threading.Thread):
    """The largest ``VmHWM`` (peak RSS) of this process's sandboxed descendants, sampled from
    ``/proc`` every ``every`` seconds (a high-water mark: only growth in a process's last
    interval can be missed)."""

    MARK = b"activities.sandbox.child"

    def __init__(self, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.peak_kb = 0
        self.processes: set[int] = set()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.sample()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = (entry / "stat").read_text()
                    parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        mine = {os.getpid()}
        grew = True
        while grew:
            found = {pid for pid, parent in parents.items() if parent in mine} - mine
            grew = bool(found)
            mine |= found
        for pid in mine - {os.getpid()}:
            with contextlib.suppress(OSError, ValueError):
                if self.MARK not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_kb = max(self.peak_kb, int(line.split()[1]))
                        self.processes.add(pid)


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


async def replay(home: Path, run_id: str, *, sandboxed: bool, batch: int) -> dict[str, Any]:
    settings = settings_for(home)
    timings: dict[str, float] = {}
    async with open_stores(settings.stores) as stores:
        engine = ReplayEngine(
            stores.ledger,
            stores.evidence,
            stores.artifacts,
            catalogs(SqlWorldStore.beside(stores.db.engine.url)),
        )
        # a long replay writes more than the default per-replay quota (a documented setting)
        sandbox = SandboxSettings(max_write_bytes=4 * 1024**3)
        runner = SandboxedSteps(engine, sandbox, catalog_factory=CATALOG_FACTORY)
        plan = ReplayPlan(
            replay_id=f"bench-{uuid.uuid4().hex[:10]}",
            source_run_id=run_id,
            mode=ReplayMode.RECORDED,
            steps_per_activity=batch,
        )
        started = time.perf_counter()
        prepared = await engine.prepare(plan)
        assert prepared.ok, prepared.problems
        timings["prepare_s"] = time.perf_counter() - started
        timings["prepare_peak_mb"] = _peak_mb()
        step = StepInput(
            plan=plan,
            step_id=prepared.start_step,
            state_ref=prepared.state_ref,
            cursors=prepared.cursors,
            head=prepared.head,
        )
        steps = 0
        sandboxes = SandboxPeak()
        sandboxes.start()
        started = time.perf_counter()
        try:
            while True:
                out = await (runner.run_steps(step) if sandboxed else engine.run_steps(step))
                steps += out.steps
                assert out.stopped is None, out.stopped
                if out.finished or out.next_step is None:
                    break
                step = next_batch(step, out)
        finally:
            await runner.aclose()
            sandboxes.stop()
        timings["steps_s"] = time.perf_counter() - started
        started = time.perf_counter()
        source = await load_trajectory(engine.ledger, run_id)
        replayed = await load_trajectory(engine.ledger, plan.replay_id)
        reproduced = reproduces(compare_trajectories(source, replayed))
        timings["compare_s"] = time.perf_counter() - started
    return {
        "steps": steps,
        "reproduced": reproduced,
        "processes": runner.started,
        "worker_peak_mb": _peak_mb(),
        "child_peak_mb": sandboxes.peak_kb / 1024,
        # CPU seconds of the worker (robust to the machine's load, unlike wall-clock timings)
        "worker_cpu_s": _cpu_s(resource.RUSAGE_SELF),
        **timings,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("home", type=Path)
    parser.add_argument("run_id")
    parser.add_argument("--unsandboxed", action="store_true")
    parser.add_argument("--batch", type=int, default=25)
    args = parser.parse_args()
    result = asyncio.run(
        replay(args.home, args.run_id, sandboxed=not args.unsandboxed, batch=args.batch)
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
