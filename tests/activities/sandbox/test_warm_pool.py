"""The warm sandbox pool: started processes wait for a replay, a replay's first batch takes
one (no sandbox start on its path) with the same results, the pool refills itself, and every
process (warm, kept) is gone after ``aclose``."""

from __future__ import annotations

import os
from pathlib import Path

from activities.sandbox.config import SandboxSettings
from bench.synthetic_replay import synthetic_replays
from tests.activities.sandbox.test_pool import _recorded, _replay
from tests.fixtures_replay import stack_settings
from tests.waiting import until


async def _until(predicate, seconds: float = 60.0) -> None:
    await until(predicate, seconds)


async def test_a_replay_takes_a_warm_process_and_the_pool_refills(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        stores = replays.stores
        warm = replays.runner(SandboxSettings(warm_processes=1))
        cold = replays.runner(SandboxSettings(warm_processes=0))
        try:
            await warm.warm_up()
            (waiting,) = warm.warm
            assert warm.started == 1
            warm_id, warm_out = await _replay(replays, warm)
            # the replay ran in the process that was waiting (kept across its batches), and
            # one more was started to wait for the next replay: no start on the replay's path
            await _until(lambda: len(warm.warm) == 1)
            assert waiting not in warm.warm
            assert (warm.started, warm.batches) == (2, 4)
            cold_id, cold_out = await _replay(replays, cold)
            assert (warm_out.state_ref, warm_out.cursors) == (cold_out.state_ref, cold_out.cursors)
            assert await _recorded(stores.ledger, warm_id) == await _recorded(
                stores.ledger, cold_id
            )
            pids = warm.warm
        finally:
            await warm.aclose()
            await cold.aclose()
        assert warm.warm == [] and warm.kept == {}
        for pid in pids:
            await _until(lambda pid=pid: not _alive(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


async def test_a_replay_worker_starts_its_warm_processes_when_it_starts(
    tmp_path: Path, temporal_server
) -> None:
    """The worker's default (one warm process) is started with the worker, before any replay,
    and is gone when the worker stops."""
    from worker.temporal import connect, running_workers

    settings = stack_settings(tmp_path, temporal_server.address)
    sandbox = settings.sandbox.model_copy(update={"warm_processes": 1})
    settings = settings.model_copy(update={"sandbox": sandbox})
    client = await connect(settings)
    # sandboxes an earlier test of this process left closing are not this worker's
    before = set(_sandboxes())
    async with running_workers(settings, "replay", client):
        await _until(lambda: len(set(_sandboxes()) - before) == 1)
        (pid,) = set(_sandboxes()) - before
    await _until(lambda: not _alive(pid))


def _sandboxes() -> list[int]:
    """Pids of the bubblewrap processes this process started."""
    me = str(os.getpid())
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        command = fields[0].split("(", 1)[1]
        parent = fields[1].split()[1]
        if parent == me and command == "bwrap" and _alive(int(stat.parent.name)):
            found.append(int(stat.parent.name))
    return found
