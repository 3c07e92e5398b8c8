"""Fault injection (small N; ``python -m bench.chaos`` runs more): a process SIGKILLed after
dispatching a write leaves it EXECUTING; once the lease has passed, ``side-effects sweep``
makes it UNKNOWN, with the lease as evidence, and the chain stays intact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.chaos.writer_child import spawn

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def _env(home: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))} | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        "REPLAYBOOK_SIDE_EFFECT_LEASE_SECONDS": "1",
    }


def test_a_write_killed_mid_flight_is_unknown_after_the_lease(tmp_path: Path) -> None:
    env = _env(tmp_path)
    run_id = "chaos-kill-1"
    child = spawn(run_id, env)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"DISPATCHED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    deadline = time.monotonic() + 120
    swept: list[dict[str, str]] = []
    while not swept and time.monotonic() < deadline:  # until the 1 s lease has passed
        result = subprocess.run(
            [REPLAYBOOK, "side-effects", "sweep", "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr.decode()
        swept = json.loads(result.stdout)["swept"]
    (effect,) = swept
    assert effect["run_id"] == run_id and effect["status"] == "UNKNOWN"
    assert "lease expired" in effect["evidence"]
    shown = subprocess.run(
        [REPLAYBOOK, "runs", "verify", run_id, "--json"], cwd=ROOT, env=env, capture_output=True
    )
    assert json.loads(shown.stdout)["intact"] is True
