"""A sandbox that never becomes ready fails the step's activity with a named error
(``SandboxStartTimeoutError``) instead of hanging the worker, and leaves no process behind;
the spawn runs no Python between fork and exec (the limits come from ``prlimit``)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.replay import ReplayActivities
from activities.sandbox import bwrap
from activities.sandbox.config import SandboxSettings
from bench.synthetic_replay import synthetic_replays
from models.errors import SandboxStartTimeoutError
from tests.fixtures_replay import stack_settings


def _stuck_bwrap(tmp_path: Path) -> Path:
    """A stand-in for bubblewrap that starts and then never execs the child (what a child
    deadlocked before exec, or a wedged namespace setup, looks like from the worker)."""
    script = tmp_path / "stuck-bwrap"
    marker = tmp_path / "stuck.pid"
    script.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 600\n")
    script.chmod(0o755)
    return script


async def test_a_stuck_sandbox_start_fails_the_activity_with_a_named_error(
    tmp_path: Path,
) -> None:
    settings = SandboxSettings(bwrap=str(_stuck_bwrap(tmp_path)), start_seconds=2, warm_processes=0)
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        runner = replays.runner(settings)
        activities = ReplayActivities(replays.engine, runner)
        step = await replays.first_step(2, prefix="replay-stuck")
        began = time.monotonic()
        try:
            with pytest.raises(SandboxStartTimeoutError, match="did not report ready within 2 s"):
                # a deadline of its own: a hang fails the test instead of the suite
                async with asyncio.timeout(60):
                    await ActivityEnvironment().run(activities.replay_step, step)
        finally:
            await runner.aclose()
        assert time.monotonic() - began < 30
        # the stuck process was killed, its uid slot freed
        assert _gone(int((tmp_path / "stuck.pid").read_text()))
        assert runner._slots == set() and runner.kept == {}


def _gone(pid: int) -> bool:
    """No process ``pid``, or only its zombie (not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except (OSError, IndexError):
        return True


def test_the_spawn_sets_the_limits_with_prlimit_not_a_preexec_function() -> None:
    settings = SandboxSettings(cpu_seconds=7, max_processes=9)
    argv = bwrap.limited(settings, ["/bin/true"])
    assert Path(argv[0]).name == "prlimit" and argv[-2:] == ["--", "/bin/true"]
    assert "--cpu=7:8" in argv and "--nproc=9:9" in argv and "--core=0:0" in argv
    # nothing in the module hands Python code to run between fork and exec
    source = Path(bwrap.__file__).read_text()
    assert "preexec_fn=" not in source and "setrlimit" not in source
    assert os.access(argv[0], os.X_OK)
