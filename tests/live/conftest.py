"""The stack the live-capture tests run the framework examples against: ``replaybook dev up``
in a temporary home (real Temporal dev server, real worker, the API, and the real local model
server behind the native tool-calls front), once for the module, brought down after it. The
examples run as processes, as a user runs them, pointed at it through the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devstack.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")
#: seconds an example may take: two small-model calls, each a few seconds on two busy cores
EXAMPLE_TIMEOUT = 600


@dataclass
class LiveStack:
    home: Path
    env: dict[str, str]
    status: dict[str, Any]

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [REPLAYBOOK, *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=ROOT,
            timeout=timeout,
        )

    @property
    def model_url(self) -> str:
        return str(self.status["components"]["models"]["address"])

    def example_env(self, spool: Path) -> dict[str, str]:
        """What an example reads: the SDK's variables and the model server's URL."""
        return self.env | {
            "REPLAYBOOK_URL": str(self.status["api_url"]),
            "REPLAYBOOK_TOKEN": str(self.status["dev_token"]),
            "REPLAYBOOK_LOCAL_MODELS_URL": self.model_url,
            "REPLAYBOOK_SPOOL_DIR": str(spool),
        }

    def run_example(self, name: str, spool: Path, *args: str) -> tuple[int, dict[str, Any]]:
        """Run ``examples/live/<name>.py --json``: its exit code and the JSON it printed."""
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "live" / f"{name}.py"), "--json", *args],
            capture_output=True,
            text=True,
            env=self.example_env(spool),
            cwd=ROOT,
            timeout=EXAMPLE_TIMEOUT,
        )
        lines = done.stdout.strip().splitlines()
        assert lines, f"{name} printed nothing (exit {done.returncode}): {done.stderr[-3000:]}"
        return done.returncode, json.loads(lines[-1])


@pytest.fixture(scope="module")
def live_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    home = tmp_path_factory.mktemp("live-stack")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPLAYBOOK_", "AWS_", "TEMPORAL_", "OTEL_"))
    } | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        # this checkout's code in every process the stack and the examples start
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    stack = LiveStack(home, env, {})
    port, ui_port, api_port = free_ports(3)
    up = stack.cli(
        "dev", "up", "--temporal-port", str(port), "--ui-port", str(ui_port),
        "--api-port", str(api_port),
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        status = stack.cli("dev", "status", "--json")
        stack.status = json.loads(status.stdout)
        yield stack
    finally:
        down = stack.cli("dev", "down")
        assert down.returncode == 0, down.stdout + down.stderr
