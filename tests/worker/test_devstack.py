"""``replaybook dev up | status | down`` as a user runs them: real processes, real servers.

The worker is a stand-in (``REPLAYBOOK_DEV_WORKER_COMMAND``): a process that writes the
environment it was given to ``$REPLAYBOOK_HOME/worker-env.json``, starts one child in its
process group and sleeps.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from devstack.ports import free_ports, port_is_free
from devstack.stack import (
    WORKER_COMMAND_ENV,
    default_worker_command,
    load_stack_state,
    pid_alive,
    port_answers,
    stack_owns_s3,
    state_path,
    terminate,
    worker_command,
)

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")

FAKE_WORKER = """
import json, os, pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
keys = ["TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "REPLAYBOOK_HOME", "REPLAYBOOK_S3_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "REPLAYBOOK_METRICS_PORT"]
seen = {k: os.environ.get(k) for k in keys} | {"pid": os.getpid(), "child_pid": child.pid}
path = pathlib.Path(os.environ["REPLAYBOOK_HOME"], "worker-env.json")
path.with_suffix(".tmp").write_text(json.dumps(seen))
path.with_suffix(".tmp").replace(path)
time.sleep(3600)
"""


def run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPLAYBOOK_", "AWS_", "TEMPORAL_"))
    }
    return subprocess.run(
        [REPLAYBOOK, *args],
        capture_output=True,
        text=True,
        env=base
        | {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_LOG_FORMAT": "json",
            # the local model server has tests of its own (tests/models)
            "REPLAYBOOK_LOCAL_MODELS": "off",
        }
        | env,
        cwd=ROOT,
        timeout=120,
    )


SETTINGS_PROBE = """
import json, sys
from cli.common import cli_settings
from worker.settings import load_settings
s = load_settings() if sys.argv[1] == "production" else cli_settings()
print(json.dumps({"temporal": s.temporal.address,
                  "s3": [s.artifacts.s3_endpoint_url, s.artifacts.s3_access_key]}))
"""


def cli_settings_of(home: Path, production: bool = False, **env: str) -> dict[str, Any]:
    """The settings a CLI process (or, ``production``, a worker) under ``home`` reads."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPLAYBOOK_", "AWS_", "TEMPORAL_"))
    }
    result = subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE, "production" if production else "cli"],
        capture_output=True,
        text=True,
        env=base | {"REPLAYBOOK_HOME": str(home)} | env,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def ok_json(result: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, Any]:
    assert result.returncode == code, result.stdout + result.stderr
    return json.loads(result.stdout)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def pids(status: dict[str, Any]) -> dict[str, int]:
    return {name: c["pid"] for name, c in status["components"].items()}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    yield home
    # Whatever a failing test left behind: stop it through the CLI, then by recorded pid.
    state = load_stack_state(home)
    run(home, "dev", "down")
    for record in (state or {}).get("components", {}).values():
        terminate(record.get("pid"), record.get("pid_start"), timeout=5)


def test_stack_owns_s3_only_for_s3_artifacts_without_an_endpoint() -> None:
    assert stack_owns_s3({"REPLAYBOOK_ARTIFACTS": "s3://bucket/prefix"})
    assert not stack_owns_s3(
        {"REPLAYBOOK_ARTIFACTS": "s3://bucket", "REPLAYBOOK_S3_ENDPOINT_URL": "http://s3:9000"}
    )
    assert not stack_owns_s3({"REPLAYBOOK_ARTIFACTS": "/var/artifacts"})
    assert not stack_owns_s3({})


def test_worker_command_defaults_to_the_real_worker() -> None:
    real = [sys.executable, "-m", "worker", "--queue", "all"]
    assert default_worker_command() == real
    assert worker_command({}) == real
    assert worker_command({WORKER_COMMAND_ENV: "python -c 'print(1)'"}) == [
        "python",
        "-c",
        "print(1)",
    ]


def test_status_and_down_without_a_stack(home: Path) -> None:
    status = ok_json(run(home, "dev", "status", "--json"), code=1)
    assert status["running"] is False and status["components"] == {}
    result = run(home, "dev", "down")
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stdout


def test_dev_stack_lifecycle(home: Path) -> None:
    temporal_port, ui_port = free_ports(2)
    env = {
        WORKER_COMMAND_ENV: shlex.join([sys.executable, "-c", FAKE_WORKER]),
        "REPLAYBOOK_ARTIFACTS": "s3://rb-dev/artifacts",  # no endpoint: the stack runs SeaweedFS
    }
    up = ["dev", "up", "--temporal-port", str(temporal_port), "--ui-port", str(ui_port)]

    # up: everything starts, detached (the CLI has exited)
    started = ok_json(run(home, *up, "--json", **env))
    assert started["actions"] == {
        "temporal": "started",
        "seaweedfs": "started",
        "worker": "started",
        "api": "started",
    }

    status = ok_json(run(home, "dev", "status", "--json"))
    assert status["running"] is True
    components = status["components"]
    assert set(components) == {"temporal", "seaweedfs", "worker", "api"}
    assert all(c["alive"] and c["pid_alive"] for c in components.values())
    temporal, seaweedfs = components["temporal"], components["seaweedfs"]
    assert temporal["port"] == temporal_port and temporal["port_answering"] is True
    assert temporal["address"] == f"127.0.0.1:{temporal_port}"
    assert temporal["ui_url"] == f"http://127.0.0.1:{ui_port}"
    assert port_answers("127.0.0.1", ui_port)
    assert seaweedfs["port_answering"] is True
    assert seaweedfs["endpoint_url"] == f"http://127.0.0.1:{seaweedfs['port']}"
    assert (home / "dev" / "temporal.log").is_file() and (home / "dev" / "worker.log").is_file()
    # the API answers on its port, with the stack's generated admin token only
    assert components["api"]["port_answering"] is True
    assert status["api_port"] == components["api"]["port"] and len(status["dev_token"]) >= 32
    assert port_answers("127.0.0.1", status["worker_metrics_port"]) is False  # a fake worker

    # the state names the S3 endpoint and credentials, and they work
    state = load_stack_state(home)
    assert state is not None
    assert state_path(home).stat().st_mode & 0o077 == 0
    s3 = state["components"]["seaweedfs"]
    boto3.client(
        "s3",
        endpoint_url=s3["endpoint_url"],
        aws_access_key_id=s3["access_key"],
        aws_secret_access_key=s3["secret_key"],
        region_name=s3["region"],
        config=Config(retries={"max_attempts": 1}),
    ).list_buckets()

    # the worker was pointed at the stack  [fake worker: switch when worker/__main__.py exists]
    worker_env_path = home / "worker-env.json"
    wait_until(worker_env_path.exists, "the worker to write its environment")
    seen = json.loads(worker_env_path.read_text())
    assert seen["pid"] == components["worker"]["pid"]
    assert seen["TEMPORAL_ADDRESS"] == f"127.0.0.1:{temporal_port}"
    assert seen["TEMPORAL_NAMESPACE"] == "default"
    assert seen["REPLAYBOOK_HOME"] == str(home.resolve())
    assert seen["REPLAYBOOK_S3_ENDPOINT_URL"] == s3["endpoint_url"]
    assert (seen["AWS_ACCESS_KEY_ID"], seen["AWS_SECRET_ACCESS_KEY"]) == (
        s3["access_key"],
        s3["secret_key"],
    )
    assert seen["REPLAYBOOK_METRICS_PORT"] == str(status["worker_metrics_port"])
    worker_child = seen["child_pid"]

    # the same addresses in the env file the CLI reads below its environment (and only it)
    dev_env = home / "dev" / "env"
    assert dev_env.stat().st_mode & 0o077 == 0
    assert f"TEMPORAL_ADDRESS=127.0.0.1:{temporal_port}" in dev_env.read_text().splitlines()
    found = cli_settings_of(home)
    assert found["temporal"] == f"127.0.0.1:{temporal_port}"
    assert found["s3"] == [s3["endpoint_url"], s3["access_key"]]
    assert cli_settings_of(home, TEMPORAL_ADDRESS="10.0.0.1:7233")["temporal"] == "10.0.0.1:7233"
    mine = cli_settings_of(home, REPLAYBOOK_S3_ENDPOINT_URL="http://s3.example:9000")
    assert mine["s3"] == ["http://s3.example:9000", None]  # the stack's keys are not sent there
    assert cli_settings_of(home, production=True)["temporal"] == "127.0.0.1:7233"
    assert pid_alive(worker_child)

    # a second up is a no-op
    again = run(home, *up, **env)
    assert again.returncode == 0, again.stderr
    assert "already running; nothing to do" in again.stdout
    assert pids(ok_json(run(home, "dev", "status", "--json"))) == pids(status)

    # one component dies: status says so, up restarts only it, on the same port
    os.kill(temporal["pid"], signal.SIGKILL)
    wait_until(lambda: not pid_alive(temporal["pid"]), "temporal to die")
    degraded = ok_json(run(home, "dev", "status", "--json"), code=1)
    assert degraded["running"] is False
    assert degraded["components"]["temporal"]["alive"] is False
    assert degraded["components"]["seaweedfs"]["alive"] is True
    assert degraded["components"]["worker"]["alive"] is True

    restarted = ok_json(run(home, *up, "--json", **env))
    assert restarted["actions"] == {
        "temporal": "restarted",
        "seaweedfs": "running",
        "worker": "running",
        "api": "running",
    }
    after = pids(restarted)
    assert after["temporal"] != temporal["pid"]
    assert after["seaweedfs"] == seaweedfs["pid"]
    assert after["worker"] == components["worker"]["pid"]
    assert restarted["components"]["temporal"]["port"] == temporal_port
    assert ok_json(run(home, "dev", "status", "--json"))["running"] is True

    # down stops everything, children included, and forgets the stack
    down = ok_json(run(home, "dev", "down", "--json"))
    assert down["stopped"] == ["api", "worker", "temporal", "seaweedfs"]
    for pid in [*after.values(), worker_child]:
        assert not pid_alive(pid), pid
    assert port_is_free("127.0.0.1", temporal_port)
    assert port_is_free("127.0.0.1", ui_port)
    assert not state_path(home).exists()
    assert not dev_env.exists()
    assert ok_json(run(home, "dev", "status", "--json"), code=1)["components"] == {}


def test_worker_that_crashes_on_start_is_reported(home: Path) -> None:
    temporal_port, ui_port = free_ports(2)
    # It leaves a child behind in its process group, which `down` must still stop.
    script = (
        "import subprocess, sys; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)']); "
        "print('no queue here; child', child.pid, flush=True); sys.exit(3)"
    )
    crash = shlex.join([sys.executable, "-c", script])
    result = run(
        home,
        *["dev", "up", "--temporal-port", str(temporal_port), "--ui-port", str(ui_port)],
        **{WORKER_COMMAND_ENV: crash},
    )
    assert result.returncode == 4, result.stdout + result.stderr
    assert "exited with code 3" in result.stderr and "no queue here" in result.stderr
    child = int(result.stderr.split("no queue here; child ")[1].split()[0])
    assert pid_alive(child)
    status = ok_json(run(home, "dev", "status", "--json"), code=1)
    assert status["components"]["temporal"]["alive"] is True  # what started is recorded …
    assert status["components"]["worker"]["alive"] is False
    assert "exited with code 3" in status["components"]["worker"]["error"]
    assert "seaweedfs" not in status["components"]  # artifacts are local here
    down = ok_json(run(home, "dev", "down", "--json"))  # … so down stops it
    assert down["stopped"] == ["temporal"]
    assert not pid_alive(status["components"]["temporal"]["pid"])
    assert not pid_alive(child)
