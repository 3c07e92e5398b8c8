"""``SiblingGroups.acquire`` when the group may grow but no started process is at hand: the new
process is started for the group meanwhile, and the batch takes whichever comes first — a
sibling's process freed by its batch, or the new one. Pure bookkeeping: fake processes."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any, cast

from activities.sandbox.process import StepProcess
from activities.sandbox.siblings import GroupKey, SiblingGroups

KEY: GroupKey = ("INC-1-cf1", "run-1", "plan")
_pids = itertools.count(100)


@dataclass
class _Proc:
    """What ``SiblingGroups`` reads and writes of a ``StepProcess``."""

    alive: bool = True
    replay_id: str = ""
    idle_timer: Any = None
    idle_since: float = 0.0
    process: Any = field(default_factory=lambda: type("P", (), {"pid": next(_pids)})())


def _proc() -> StepProcess:
    return cast(StepProcess, _Proc())


async def _released(child: StepProcess) -> None:
    cast(_Proc, child).alive = False


async def test_a_first_batch_takes_a_siblings_process_before_a_slow_start() -> None:
    groups = SiblingGroups(share=2, idle_seconds=60, release=_released)
    first = _proc()

    async def at_once() -> StepProcess:
        return first

    assert await groups.acquire(KEY, "INC-1-cf1-000", at_once, first=True) is first
    starting: asyncio.Future[StepProcess] = asyncio.get_running_loop().create_future()
    began = asyncio.Event()

    async def slow() -> StepProcess:
        began.set()
        return await starting

    waiting = asyncio.ensure_future(
        groups.acquire(KEY, "INC-1-cf1-001", slow, first=True, started=lambda: False)
    )
    await began.wait()  # the start has begun, and the second batch waits
    assert not waiting.done()
    assert groups.started_for("INC-1-cf1") == 2  # the new process has its place already
    groups.put_back(KEY, first)  # the first sibling's batch ended: its process serves next
    assert await waiting is first
    assert first.replay_id == "INC-1-cf1-001"
    later = _proc()
    starting.set_result(later)  # the new process arrives: idle in the group for the next
    await asyncio.gather(*groups._growing)
    assert groups.processes() == {KEY: [later.process.pid]}
    assert groups.started_for("INC-1-cf1") == 2
    await groups.aclose()
    assert not cast(_Proc, later).alive


async def test_a_started_process_at_hand_is_taken_at_once() -> None:
    groups = SiblingGroups(share=2, idle_seconds=60, release=_released)
    one, two = _proc(), _proc()
    handed = iter([one, two])

    async def fresh() -> StepProcess:
        return next(handed)

    assert await groups.acquire(KEY, "INC-1-cf1-000", fresh, first=True) is one
    got = await groups.acquire(KEY, "INC-1-cf1-001", fresh, first=True, started=lambda: True)
    assert got is two  # not waiting for the sibling's process


async def test_a_failed_start_lets_the_waiting_batch_start_its_own() -> None:
    groups = SiblingGroups(share=2, idle_seconds=60, release=_released)
    first, own = _proc(), _proc()

    async def at_once() -> StepProcess:
        return first

    await groups.acquire(KEY, "INC-1-cf1-000", at_once, first=True)
    attempts = 0

    async def fails_once() -> StepProcess:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise OSError("bubblewrap did not start")
        return own

    got = await groups.acquire(KEY, "INC-1-cf1-001", fails_once, first=True, started=lambda: False)
    assert got is own and attempts == 2
    assert groups.started_for("INC-1-cf1") == 2
