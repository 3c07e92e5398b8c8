"""Run batches of replay steps in sandboxed processes and broker their store calls.

A replay's batches arrive one activity at a time. Starting a sandbox and reloading the source
evidence for each of them made a recorded replay about five times slower, so the process that
ran a replay's batch is kept for its next batch on this worker (keyed by replay id): it is
killed when the replay finishes, fails, is canceled or closed, after ``idle_seconds`` without
a batch, when it has used a quarter of its CPU limit (RLIMIT_CPU counts a process's whole
life), after ``jobs_per_process`` batches, and with the worker. A batch that lands on another
worker, or after a crash, simply starts a new process: the process holds only caches (the
windows of the source evidence, the catalogs), so the outputs are the same either way. Between
batches the child kills whatever the step's code left running and empties its /tmp.

The sibling replays of an announced fan-out (an incident's replays, a ``--repeat`` parent's
children) take turns in a few processes of their own group instead (``siblings``); the warm
pool and every start and end of a process are ``pool``'s; one batch in a process, ``batch``'s.
"""

from __future__ import annotations

import asyncio
import os
import time

from activities.sandbox.batch import CALL_GRACE_SECONDS, Batches
from activities.sandbox.config import SandboxSettings
from activities.sandbox.guard import Quotas
from activities.sandbox.pool import ProcessPool
from activities.sandbox.process import StepProcess
from activities.sandbox.siblings import GroupKey, SiblingGroups, group_of
from models.errors import SandboxedStepFailedError, SandboxUnavailableError
from models.replay_flow import StepInput, StepOutput
from runtime.replay.engine import ReplayEngine

#: a kept process is replaced once it has used this share of its CPU limit, so the next batch
#: still gets at least three quarters of the limit
RECYCLE_AT_CPU_SHARE = 0.25


class SandboxedSteps:
    """``run_steps`` like the engine's, with the steps executed under bubblewrap."""

    def __init__(
        self,
        engine: ReplayEngine,
        settings: SandboxSettings,
        *,
        catalog_factory: str,
    ) -> None:
        self.engine = engine
        self.settings = settings
        #: ``module:function`` the child imports to build its agent catalogs (a reference, not a
        #: callable: the child is another process); the worker passes its own
        self.catalogs = catalog_factory
        #: the isolation recorded for the steps this runner executes
        self.isolation = settings.isolation
        self.quotas = Quotas(
            write_bytes=settings.max_write_bytes,
            calls_per_batch=settings.max_calls_per_batch,
            message_bytes=settings.max_message_bytes,
            write_bytes_per_step=settings.max_write_bytes_per_step,
        )
        self._batches = Batches(engine, settings, self.quotas, catalog_factory)
        self._pool = ProcessPool(settings, self._batches.prime)
        self._siblings = SiblingGroups(
            settings.fanout_share, settings.idle_seconds, self._pool.release
        )
        #: processes kept between a replay's batches, by replay id
        self._kept: dict[str, StepProcess] = {}
        # sandboxes starting at once compete for the CPU with the worker's own heartbeats:
        # more than a few per core only queue up (the waiting activity keeps heartbeating)
        self._running = asyncio.Semaphore(2 * (os.cpu_count() or 1))
        self._max_kept = 4 * (os.cpu_count() or 1)

    async def run_steps(self, step: StepInput) -> StepOutput:
        replay_id = step.plan.replay_id
        group = self._siblings.members.get(replay_id) or group_of(
            step, self._pool.demand, self.settings.fanout_share
        )
        if group is not None:
            return await self._shared(group, step)
        # a replay's first batch during a fan-out waits for the pool's next process outside
        # the batches' semaphore: batches in started processes never queue behind starts
        first = not step.step_index and replay_id not in self._kept
        ready = await self._pool.ready(replay_id) if first else None
        async with self._running:
            child = ready or self._kept.pop(replay_id, None)
            if child is not None and child.idle_timer is not None:
                child.idle_timer.cancel()
            if child is None or not child.alive:
                if child is not None:
                    await self._pool.release(child)
                child = await self._pool.take(replay_id)
            child, output = await self._batch(child, step)
            if output.finished or not self._reusable(child):
                await self._pool.release(child)
            else:
                self._keep(child)
            return output

    async def _shared(self, group: GroupKey, step: StepInput) -> StepOutput:
        """A batch of a fan-out's child in a process of its sibling group (one batch at a
        time in each; the process is tidied by the child after every batch)."""
        replay_id = step.plan.replay_id

        async def fresh() -> StepProcess:
            return await self._pool.ready(replay_id) or await self._pool.take(replay_id)

        first = not step.step_index
        child = await self._siblings.acquire(group, replay_id, fresh, first, self._pool.has_started)
        try:
            async with self._running:
                child, output = await self._batch(child, step)
        except BaseException:  # released by _batch: its place in the group is free again
            self._siblings.gone(group)
            raise
        if output.finished:
            self._siblings.forget(replay_id)
        if self._reusable(child):
            self._siblings.put_back(group, child)
        else:
            await self._pool.release(child)
            self._siblings.gone(group)
        return output

    async def _batch(self, child: StepProcess, step: StepInput) -> tuple[StepProcess, StepOutput]:
        """The batch's output, and the process that ran it: a process that died between
        batches, before this one reached it, ran nothing of it, so it is replaced by a new one
        that runs the batch. When this raises, the process that raised is released."""
        try:
            try:
                return child, await self._batches.run(child, step)
            except SandboxedStepFailedError:
                if not (child.jobs > 1 and child.frames == 0):
                    raise
            await self._pool.release(child)
            child = await self._pool.start(step.plan.replay_id)
            return child, await self._batches.run(child, step)
        except BaseException:  # failed, violated, timed out or canceled: never reused
            await self._pool.release(child)
            raise

    async def close(self, replay_id: str) -> None:
        """Kill the process kept for ``replay_id`` (the replay ended or was canceled); a
        process of a sibling group serves the replay's siblings on and is not killed."""
        self._siblings.forget(replay_id)
        child = self._kept.pop(replay_id, None)
        if child is not None:
            await self._pool.release(child)

    async def aclose(self) -> None:
        """Kill every kept, shared and warm process (the worker is shutting down)."""
        for replay_id in list(self._kept):
            await self.close(replay_id)
        await self._siblings.aclose()
        await self._pool.aclose()

    @property
    def kept(self) -> dict[str, int]:
        """Replay id -> pid of the process kept for its next batch."""
        return {r: c.process.pid for r, c in self._kept.items()}

    @property
    def shared(self) -> dict[GroupKey, list[int]]:
        """Sibling group -> pids of its idle processes."""
        return self._siblings.processes()

    @property
    def _slots(self) -> set[int]:
        """uid offsets of the sandboxes alive now."""
        return self._pool.slots

    @property
    def started(self) -> int:
        """Processes started (for the benchmark and the tests)."""
        return self._pool.started

    @property
    def batches(self) -> int:
        """Batches run (for the benchmark and the tests)."""
        return self._batches.count

    # the pool ---------------------------------------------------------------------------------

    async def warm_up(self) -> None:
        """Start the warm processes now (the pool refills itself after each one is taken)."""
        await self._pool.warm_up()

    @property
    def warm(self) -> list[int]:
        """Pids of the started processes waiting for a replay."""
        return [c.process.pid for c in self._pool.warm]

    def expect(self, key: str, count: int) -> int:
        """``count`` child replays whose ids start with ``key-`` are about to run here (an
        incident's or a ``--repeat`` parent's fan-out): the pool grows to hold a started
        process for each (at most ``settings.fanout_warm``) now, off their first batch's path;
        with sibling sharing on, for at most ``settings.fanout_share`` of them less the
        processes their group already has (a parent announces each batch of children: the
        next batch shares the processes of the one before). Returns the pool's new size."""
        share = self.settings.fanout_share
        if share > 0:
            count = max(min(count, share) - self._siblings.started_for(key), 0)
        return self._pool.expect(key, count)

    # kept processes ---------------------------------------------------------------------------

    def _reusable(self, child: StepProcess) -> bool:
        return (
            child.alive
            and child.jobs < self.settings.jobs_per_process
            and child.cpu_seconds < RECYCLE_AT_CPU_SHARE * self.settings.cpu_seconds
        )

    def _keep(self, child: StepProcess) -> None:
        previous = self._kept.pop(child.replay_id, None)
        if previous is not None:  # two batches of one replay ran at once: keep the newer
            self._pool.close_later(previous)
        child.idle_since = time.monotonic()
        loop = asyncio.get_running_loop()
        child.idle_timer = loop.call_later(
            self.settings.idle_seconds, self._idle_out, child.replay_id, child
        )
        self._kept[child.replay_id] = child
        while len(self._kept) > self._max_kept:  # the longest idle goes first
            oldest = min(self._kept, key=lambda r: self._kept[r].idle_since)
            self._pool.close_later(self._kept.pop(oldest))

    def _idle_out(self, replay_id: str, child: StepProcess) -> None:
        if self._kept.get(replay_id) is child:
            del self._kept[replay_id]
            self._pool.close_later(child)


__all__ = ["CALL_GRACE_SECONDS", "SandboxUnavailableError", "SandboxedSteps"]
