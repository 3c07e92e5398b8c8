"""Sandbox processes shared by the sibling replays of one fan-out on this worker.

An incident's replays (or a ``--repeat`` parent's children) start 10-20 at a time, and every
sandbox start is ~0.5 s of CPU (bubblewrap, Python, the catalogs' import): on two cores twenty
starts took seconds however early the pool began them. So the children of one announced
fan-out that run the same plan — the repetitions of one replay of one source run (a
``--repeat`` parent's children, differing only in their sampling seed and their share of the
budget) — take turns in at most ``settings.fanout_share`` processes of their own group: one
batch at a time per process, the process tidied between batches as between any two batches
(its other processes killed, its /tmp emptied), each replay's state inside it kept under its
own replay id and checked against its head. Replays of another parent, another plan (an
incident's exact replay and its counterfactuals), another source run or another incident never
share a process. Why that trade is acceptable, and what stays isolated: docs/sandbox.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from activities.sandbox.demand import Demand
from activities.sandbox.process import StepProcess
from models.replay_flow import StepInput

#: (fan-out key, source run id, sha256 of the plan but for the child's own id, seed and budget)
GroupKey = tuple[str, str, str]
#: what differs between the repetitions of one plan (``ReplayWorkflow._repeat``)
_PER_CHILD = {"replay_id", "sampling_seed", "budget"}


def group_of(step: StepInput, demand: Demand, share: int) -> GroupKey | None:
    """The sharing group of ``step``'s replay: its parent's key and its plan (but for what
    differs between repetitions) when that key was announced as a fan-out on this worker
    (``expect_sandboxes``) and sharing is on; None otherwise (a process of its own)."""
    parent, _, _ = step.plan.replay_id.rpartition("-")
    if share <= 0 or not parent or not demand.announced(parent, time.monotonic()):
        return None
    plan = step.plan.model_dump_json(exclude=_PER_CHILD)
    return (parent, step.plan.source_run_id, hashlib.sha256(plan.encode()).hexdigest())


@dataclass
class _Group:
    #: processes of the group started (idle or serving a batch)
    size: int = 0
    idle: list[StepProcess] = field(default_factory=list)
    #: batches waiting for one of the group's processes (None: room to start one), a new
    #: replay's first batch ahead of a started replay's next: each child starts promptly,
    #: and the group's work is the same either way
    first: deque[asyncio.Future[StepProcess | None]] = field(default_factory=deque)
    next: deque[asyncio.Future[StepProcess | None]] = field(default_factory=deque)

    def next_waiting(self) -> asyncio.Future[StepProcess | None] | None:
        """The batch served next (a canceled wait is skipped); None: nobody waits."""
        for queue in (self.first, self.next):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    return waiter
        return None


class SiblingGroups:
    """The processes of each sharing group, idle or serving one batch."""

    def __init__(
        self,
        share: int,
        idle_seconds: float,
        release: Callable[[StepProcess], Awaitable[None]],
    ) -> None:
        #: processes at most per group
        self.share = share
        self.idle_seconds = idle_seconds
        #: kills a process and frees its slot (the pool's)
        self._release = release
        self._groups: dict[GroupKey, _Group] = {}
        #: replay id -> the group it was served by (its later batches stay in it)
        self.members: dict[str, GroupKey] = {}
        self._closing: set[asyncio.Task[None]] = set()
        #: processes being started for a group while its batches wait (``acquire``)
        self._growing: set[asyncio.Future[None]] = set()

    def started_for(self, parent: str) -> int:
        """Processes the groups of fan-out ``parent`` hold now (idle or serving a batch)."""
        return sum(g.size for k, g in self._groups.items() if k[0] == parent)

    def processes(self) -> dict[GroupKey, list[int]]:
        """Group -> pids of its idle processes (for the tests)."""
        return {k: [c.process.pid for c in g.idle] for k, g in self._groups.items() if g.idle}

    async def acquire(
        self,
        key: GroupKey,
        replay_id: str,
        fresh: Callable[[], Awaitable[StepProcess]],
        first: bool = False,
        started: Callable[[], bool] | None = None,
    ) -> StepProcess:
        """A process of ``key`` for one batch of ``replay_id`` (``first``: its first batch):
        an idle one, else a new one (``fresh``) while the group has fewer than ``share``, else
        the next one freed. ``started`` says whether ``fresh`` has a started process at hand:
        when it has none and the group already has a process, the new one is started for the
        group meanwhile and the batch takes whichever comes first, that one or a sibling's
        (a start is ~0.5 s of CPU, seconds on a busy machine; a sibling's batch ~0.05 s)."""
        self.members[replay_id] = key
        group = self._groups.setdefault(key, _Group())
        while True:
            while group.idle:
                child = group.idle.pop()
                if child.idle_timer is not None:
                    child.idle_timer.cancel()
                if child.alive:
                    child.replay_id = replay_id
                    return child
                group.size -= 1
                await self._release(child)
            if group.size < self.share and group.size and started is not None and not started():
                group.size += 1
                growing = asyncio.ensure_future(self._grow(key, fresh))
                self._growing.add(growing)
                growing.add_done_callback(self._growing.discard)
            elif group.size < self.share:
                group.size += 1
                return await self._fresh_for(key, group, replay_id, fresh)
            waiter: asyncio.Future[StepProcess | None] = asyncio.get_running_loop().create_future()
            (group.first if first else group.next).append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed over as it was canceled
                    passed = waiter.result()
                    if passed is None:
                        self._gone(key, group, counted=False)
                    else:
                        self.put_back(key, passed)
                raise
            if handed is not None:
                handed.replay_id = replay_id
                return handed
            group.size += 1  # room made for this batch by a process that ended
            return await self._fresh_for(key, group, replay_id, fresh)

    async def _fresh_for(
        self,
        key: GroupKey,
        group: _Group,
        replay_id: str,
        fresh: Callable[[], Awaitable[StepProcess]],
    ) -> StepProcess:
        """A new process of ``key`` (its place already counted) for a batch of ``replay_id``;
        a start that fails frees its place again."""
        try:
            child = await fresh()
        except BaseException:
            self._gone(key, group)
            raise
        child.replay_id = replay_id
        return child

    async def _grow(self, key: GroupKey, fresh: Callable[[], Awaitable[StepProcess]]) -> None:
        """One more process for ``key`` (its place already counted), to the next waiting
        sibling or idle in the group; a start that fails frees its place again."""
        try:
            child = await fresh()
        except Exception:  # the next batch that needs a process meets the problem itself
            self.gone(key)
            return
        except asyncio.CancelledError:
            self.gone(key)
            raise
        self.put_back(key, child)

    def put_back(self, key: GroupKey, child: StepProcess) -> None:
        """``child`` finished a batch and may serve another: to the next waiting sibling, or
        idle in its group until ``idle_seconds`` pass."""
        group = self._groups.get(key)
        if group is None:  # the worker is shutting down: nothing to keep it for
            self._later(self._release(child))
            return
        waiter = group.next_waiting()
        if waiter is not None:
            waiter.set_result(child)
            return
        child.idle_since = time.monotonic()
        child.idle_timer = asyncio.get_running_loop().call_later(
            self.idle_seconds, self._idle_out, key, child
        )
        group.idle.append(child)

    def gone(self, key: GroupKey) -> None:
        """A process of ``key`` was released (failed, violated, worn out: never used again):
        its place in the group is free for a new one."""
        group = self._groups.get(key)
        if group is not None:
            self._gone(key, group)

    async def discard(self, key: GroupKey, child: StepProcess) -> None:
        """Kill ``child`` and free its place in the group."""
        try:
            await self._release(child)
        finally:
            self.gone(key)

    def forget(self, replay_id: str) -> None:
        """``replay_id`` ended: its later batches (none) need no group."""
        self.members.pop(replay_id, None)

    def _gone(self, key: GroupKey, group: _Group, counted: bool = True) -> None:
        """One process fewer in ``group``: the next waiting sibling may start one."""
        if counted:
            group.size -= 1
        waiter = group.next_waiting()
        if waiter is not None:
            waiter.set_result(None)
            return
        if group.size <= 0 and not group.idle:
            self._groups.pop(key, None)

    def _idle_out(self, key: GroupKey, child: StepProcess) -> None:
        group = self._groups.get(key)
        if group is None or child not in group.idle:
            return
        group.idle.remove(child)
        self._later(self.discard(key, child))

    def _later(self, closing: Awaitable[None]) -> None:
        task = asyncio.ensure_future(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Kill every idle process (the worker is shutting down)."""
        for growing in list(self._growing):  # a process started now would be left idle
            growing.cancel()
        await asyncio.gather(*self._growing, return_exceptions=True)
        for key, group in list(self._groups.items()):
            while group.idle:
                child = group.idle.pop()
                if child.idle_timer is not None:
                    child.idle_timer.cancel()
                await self.discard(key, child)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
