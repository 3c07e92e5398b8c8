"""The started sandbox processes of a replay worker that serve no replay yet: the standing warm
pool, grown ahead of an announced fan-out, and the starts and ends of every process (each one
gets a uid slot of its own while it lives).

Each start (bubblewrap, a Python child, the catalogs imported by its prime) is CPU-bound,
~0.5 s of CPU here: the pool starts them off the replays' path, several at once, and hands a
first batch that comes while it is filling the next process it starts instead of letting that
batch start one of its own that would compete with the pool's.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

import structlog

from activities.sandbox.config import SandboxSettings
from activities.sandbox.demand import EXPECT_SECONDS, Demand
from activities.sandbox.process import StepProcess

log = structlog.get_logger(__name__)


class ProcessPool:
    """Warm processes, their refill, and the uid slots of every process alive."""

    def __init__(
        self, settings: SandboxSettings, prime: Callable[[StepProcess], Awaitable[None]]
    ) -> None:
        self.settings = settings
        #: has a started process import the catalogs and build its engine (the runner's)
        self._prime = prime
        #: uid offsets of the sandboxes alive now, running, kept or warm (each its own uid)
        self.slots: set[int] = set()
        #: started processes not yet serving any replay (``settings.warm_processes`` of them,
        #: more while a fan-out announced with ``expect`` has children to come)
        self.warm: list[StepProcess] = []
        self._refilling: asyncio.Task[None] | None = None
        self.demand = Demand()
        #: first batches of a fan-out waiting for the pool's next started process
        self._waiting: list[asyncio.Future[StepProcess | None]] = []
        #: warm processes started at once when the pool is short (each start is CPU-bound)
        self._starting_at_once = 2 * (os.cpu_count() or 1)
        self._closing: set[asyncio.Task[None]] = set()
        #: processes started (for the benchmark and the tests)
        self.started = 0

    def expect(self, key: str, count: int) -> int:
        """``count`` child replays of ``key`` are about to want a process: the pool grows for
        them now (at most ``settings.fanout_warm``). Returns the pool's new size."""
        self.demand.expect(key, count, time.monotonic())
        asyncio.get_running_loop().call_later(EXPECT_SECONDS + 1, self._trim)
        self.refill_soon()
        return self._target()

    def _target(self) -> int:
        """How many warm processes the pool holds now (those waited for included)."""
        wanted = self.demand.wanted(time.monotonic()) + len(self._waiting)
        return max(self.settings.warm_processes, min(wanted, self.settings.fanout_warm))

    def has_started(self) -> bool:
        """Whether a started process waits in the pool now (``ready`` would not wait)."""
        return any(c.alive for c in self.warm)

    async def ready(self, replay_id: str) -> StepProcess | None:
        """A started process for a replay's first batch while the pool is filling for a
        fan-out: one already waiting, or the pool's next (taken in turn, never a start of its
        own competing with the pool's); None when fan-outs are off or the pool is not filling
        (the batch then takes as usual)."""
        if not self.settings.fanout_warm:
            return None
        while self.warm:
            warm = self.warm.pop(0)
            if warm.alive:
                self.demand.taken(replay_id)
                self.refill_soon()
                warm.replay_id = replay_id
                return warm
            await self.release(warm)
        if self._refilling is None or self._refilling.done():
            return None
        self.demand.taken(replay_id)
        waiter: asyncio.Future[StepProcess | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            child = await waiter
        except asyncio.CancelledError:
            handed = waiter.result() if waiter.done() and not waiter.cancelled() else None
            if handed is not None:  # handed over as the wait was canceled
                self.close_later(handed)
            raise
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
        if child is not None:
            child.replay_id = replay_id
        return child

    async def take(self, replay_id: str) -> StepProcess:
        """A warm process for ``replay_id`` if one is alive, else a new one; then refill."""
        self.demand.taken(replay_id)
        child = None
        while self.warm and child is None:
            candidate = self.warm.pop(0)
            if candidate.alive:
                child = candidate
                child.replay_id = replay_id
            else:
                await self.release(candidate)
        if child is None:
            child = await self.start(replay_id)
        self.refill_soon()
        return child

    async def warm_up(self) -> None:
        """Start the warm processes now (the pool refills itself after each one is taken)."""
        self.refill_soon()
        if self._refilling is not None:
            await asyncio.shield(self._refilling)

    def _handed(self, child: StepProcess) -> bool:
        """Give a newly started process to the first batch waiting for one, if any."""
        while self._waiting:
            waiter = self._waiting.pop(0)
            if not waiter.done():
                waiter.set_result(child)
                return True
        return False

    def _trim(self) -> None:
        """Warm processes of a fan-out whose children never came are stopped."""
        while len(self.warm) > self._target():
            self.close_later(self.warm.pop())

    def refill_soon(self) -> None:
        if len(self.warm) < self._target() and (self._refilling is None or self._refilling.done()):
            self._refilling = asyncio.ensure_future(self._refill())

    async def _refill(self) -> None:
        """Start processes, several at once, until the pool reaches its target (a start that
        fails stops the refill: the next batch meets and reports the problem itself)."""
        starting: set[asyncio.Future[bool]] = set()
        failed = False
        try:
            while True:
                short = self._target() - len(self.warm) - len(starting)
                room = self._starting_at_once - len(starting)
                for _ in range(0 if failed else max(min(short, room), 0)):
                    starting.add(asyncio.ensure_future(self._warm_one()))
                if not starting:
                    return
                done, starting = await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
                failed = failed or not all(task.result() for task in done)
        finally:
            for task in starting:
                task.cancel()
            await asyncio.gather(*starting, return_exceptions=True)
            for waiter in self._waiting:  # batches still waiting start their own process
                if not waiter.done():
                    waiter.set_result(None)
            self._waiting.clear()

    async def _warm_one(self) -> bool:
        """One more started and primed process in the pool (False: it could not be)."""
        try:
            child = await self.start("")
        except Exception as exc:
            log.warning("warm sandbox not started", error=str(exc))
            return False
        try:
            await self._prime(child)
        except asyncio.CancelledError:  # the worker is shutting down: leave nothing behind
            await self.release(child)
            raise
        except Exception as exc:
            log.warning("warm sandbox not primed", error=str(exc))
            await self.release(child)
            return False
        if not self._handed(child):
            self.warm.append(child)
        return True

    async def start(self, replay_id: str) -> StepProcess:
        """A new sandboxed process on a free uid slot."""
        slot = next(i for i in range(len(self.slots) + 1) if i not in self.slots)
        self.slots.add(slot)
        try:
            child = await StepProcess.start(
                self.settings, self.settings.uid + slot, slot, replay_id
            )
        except BaseException:
            self.slots.discard(slot)
            raise
        self.started += 1
        return child

    async def release(self, child: StepProcess) -> None:
        """Kill ``child`` and everything in its sandbox, and free its slot."""
        try:
            await child.close()
        finally:
            self.slots.discard(child.slot)

    def close_later(self, child: StepProcess) -> None:
        task = asyncio.ensure_future(self.release(child))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Stop the refill and kill every warm process; wait for the closes under way."""
        if self._refilling is not None:
            self._refilling.cancel()
            await asyncio.gather(self._refilling, return_exceptions=True)
        while self.warm:
            await self.release(self.warm.pop())
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
