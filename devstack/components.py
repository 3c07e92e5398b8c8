"""Starting each component of the embedded stack (``devstack.stack`` orchestrates them):
the Temporal dev server, SeaweedFS, the worker and the HTTP API, each in its own session with
its log under ``$REPLAYBOOK_HOME/dev``, recorded with pid, start time and ports.

The stack hands its addresses to the processes it starts through their environment
(``stack_variables``, the same variables a production deployment sets), and writes them to
``$REPLAYBOOK_HOME/dev/env`` (``write_dev_env``), which the CLI reads below the environment so
that ``replaybook …`` run by hand after ``dev up`` finds the stack. Production settings never
read that file, nor the stack's state.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devstack.processes import log_tail, port_answers, process_start_ticks
from models.errors import ConfigurationError, StoreError

HOST = "127.0.0.1"
S3_REGION = "us-east-1"
DEV_ENV_FILENAME = "env"
#: The worker variables that point it at the stack (recorded, to notice when they change).
_WORKER_WIRING = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "REPLAYBOOK_S3_ENDPOINT_URL",
    "REPLAYBOOK_LOCAL_MODELS_URL",
    # where runs are anchored and with which key (by default under the home, like the KEK): a
    # worker or API started with others anchors where the CLI does not look, so it restarts
    "REPLAYBOOK_ANCHORS",
    "REPLAYBOOK_ANCHOR_SIGNING_KEY",
)


def dev_dir(home: Path | str) -> Path:
    return Path(home) / "dev"


def dev_env_path(home: Path | str) -> Path:
    """The dotenv file of the stack's addresses (present while a stack is recorded)."""
    return dev_dir(home) / DEV_ENV_FILENAME


def stack_variables(components: Mapping[str, Any]) -> dict[str, str]:
    """The variables that point Replaybook at the stack's services: Temporal's address and
    namespace, when the stack runs SeaweedFS its S3 endpoint and credentials, and when it runs
    the local model server its URL (which registers the local models)."""
    out: dict[str, str] = {}
    temporal = components.get("temporal")
    if temporal is not None:
        out |= {
            "TEMPORAL_ADDRESS": temporal["address"],
            "TEMPORAL_NAMESPACE": temporal["namespace"],
        }
    s3 = components.get("seaweedfs")
    if s3 is not None:
        out |= {
            "REPLAYBOOK_S3_ENDPOINT_URL": s3["endpoint_url"],
            "REPLAYBOOK_S3_ACCESS_KEY_ID": s3["access_key"],
            "REPLAYBOOK_S3_SECRET_ACCESS_KEY": s3["secret_key"],
        }
    local_models = components.get("models")
    if local_models is not None:
        out["REPLAYBOOK_LOCAL_MODELS_URL"] = local_models["base_url"]
    return out


def write_dev_env(home: Path, components: Mapping[str, Any]) -> None:
    """``$REPLAYBOOK_HOME/dev/env`` (mode 0600: it holds the S3 secret), replaced atomically."""
    lines = [
        "# the embedded stack's addresses, written by `replaybook dev up` and removed by",
        "# `replaybook dev down`; the replaybook CLI reads them below its environment",
        *(f"{name}={shlex.quote(value)}" for name, value in stack_variables(components).items()),
    ]
    path = dev_env_path(home)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def launch_temporal(home: Path, port: int, ui_port: int | None, namespace: str) -> dict[str, Any]:
    from devstack.temporal_server import start_temporal_dev_server

    server = start_temporal_dev_server(
        home / "temporal",
        port=port,
        ui_port=ui_port,
        host=HOST,
        namespace=namespace,
        log_path=dev_dir(home) / "temporal.log",
    )
    server.detach()
    return {
        "pid": server.pid,
        "pid_start": process_start_ticks(server.pid),
        "host": server.host,
        "port": server.port,
        "address": server.address,
        "namespace": server.namespace,
        "ui_port": server.ui_port,
        "ui_url": server.ui_url,
        "http_port": server.http_port,
        "metrics_port": server.metrics_port,
        "db_path": str(server.db_path),
        "log_path": str(server.log_path),
        "started_at": now_iso(),
    }


def launch_seaweedfs(
    home: Path, previous: Mapping[str, Any] | None, s3_port: int | None
) -> dict[str, Any]:
    from devstack.seaweedfs import start_seaweedfs

    # A restart keeps the endpoint and credentials the running worker was given.
    access_key = previous["access_key"] if previous else "replaybook"
    secret_key = previous["secret_key"] if previous else secrets.token_urlsafe(24)

    def start(port: int | None) -> Any:
        return start_seaweedfs(
            home / "seaweedfs",
            s3_port=port,
            host=HOST,
            access_key=access_key,
            secret_key=secret_key,
            log_path=dev_dir(home) / "seaweedfs.log",
        )

    try:
        server = start(previous["port"] if previous else s3_port)
    except ConfigurationError:
        if previous is None:
            raise
        # The old port is taken (the launcher's check also counts the dead server's connections
        # in TIME_WAIT): move to a free one; the worker is restarted with the new endpoint.
        server = start(None)
    if server._log_file is not None:  # the server outlives this process
        server._log_file.close()
        server._log_file = None
    return {
        "pid": server.pid,
        "pid_start": process_start_ticks(server.pid),
        "host": HOST,
        "port": server.ports["s3"],
        "ports": server.ports,
        "endpoint_url": server.endpoint_url,
        "access_key": access_key,
        "secret_key": secret_key,
        "region": S3_REGION,
        "data_dir": str(server.data_dir),
        "log_path": str(server.log_path),
        "started_at": now_iso(),
    }


def worker_environment(
    home: Path, components: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, str]:
    """The worker's environment: the caller's, pointed at the stack's services
    (``stack_variables``)."""
    out = dict(env) | {"REPLAYBOOK_HOME": str(home)} | stack_variables(components)
    s3 = components.get("seaweedfs")
    if s3 is not None:
        # the same credentials for boto3's own chain, which nothing else may override
        for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
            out.pop(key, None)
        out |= {
            "AWS_ACCESS_KEY_ID": s3["access_key"],
            "AWS_SECRET_ACCESS_KEY": s3["secret_key"],
            "AWS_DEFAULT_REGION": s3["region"],
        }
    return out


def worker_wiring(worker_env: Mapping[str, str]) -> dict[str, str | None]:
    return {key: worker_env.get(key) for key in _WORKER_WIRING}


def launch_worker(
    home: Path,
    command: list[str],
    components: Mapping[str, Any],
    env: Mapping[str, str],
    metrics_port: int,
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    log_path = dev_dir(home) / "worker.log"
    worker_env = worker_environment(home, components, env)
    worker_env["REPLAYBOOK_METRICS_PORT"] = str(metrics_port)
    process = spawn_logged("worker", command, worker_env, log_path)
    return {
        "pid": process.pid,
        "pid_start": process_start_ticks(process.pid),
        "command": command,
        "wiring": worker_wiring(worker_env),
        "metrics_port": metrics_port,
        "log_path": str(log_path),
        "started_at": now_iso(),
    }, process


def spawn_logged(
    what: str,
    command: list[str],
    env: Mapping[str, str],
    log_path: Path,
    *,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session (so ``down`` can stop its whole process group), its
    output appended to ``log_path`` (a file, never a pipe nobody reads). ``die_with_parent``:
    the kernel kills it when the process that started it dies (a test session's server must
    not outlive a test process that was killed before its teardown)."""
    with log_path.open("ab") as log:
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
                preexec_fn=_kill_with_parent if die_with_parent else None,
            )
        except OSError as e:
            raise ConfigurationError(f"cannot start {what} {shlex.join(command)}: {e}") from e


def _kill_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent dies (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def api_environment(
    home: Path, components: Mapping[str, Any], env: Mapping[str, str], token: str
) -> dict[str, str]:
    """The API's environment: the worker's wiring, plus the stack's admin token next to any
    tokens the caller configured."""
    out = worker_environment(home, components, env)
    temporal_ui = (components.get("temporal") or {}).get("ui_url")
    if temporal_ui and not env.get("REPLAYBOOK_TEMPORAL_UI_URL"):
        # the web console links each workflow to the Temporal Web UI
        out["REPLAYBOOK_TEMPORAL_UI_URL"] = temporal_ui
    configured = env.get("REPLAYBOOK_API_TOKENS")
    out["REPLAYBOOK_API_TOKENS"] = ",".join(filter(None, (configured, f"{token}=admin")))
    return out


def launch_api(
    home: Path, port: int, api_env: dict[str, str], token: str
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    from devstack.ports import port_is_free

    if not port_is_free(HOST, port):
        raise ConfigurationError(f"API port {HOST}:{port} is taken (choose --api-port)")
    log_path = dev_dir(home) / "api.log"
    command = [sys.executable, "-m", "api", "--host", HOST, "--port", str(port)]
    process = spawn_logged("the API", command, api_env, log_path)
    return {
        "pid": process.pid,
        "pid_start": process_start_ticks(process.pid),
        "host": HOST,
        "port": port,
        "url": f"http://{HOST}:{port}",
        "dev_token": token,
        "command": command,
        "wiring": worker_wiring(api_env),
        "log_path": str(log_path),
        "started_at": now_iso(),
    }, process


def check_api_started(
    record: dict[str, Any], process: subprocess.Popen[bytes], timeout: float
) -> None:
    """Wait until the API answers on its port; fail when it exits or stays silent."""
    deadline = time.monotonic() + timeout
    while not port_answers(HOST, record["port"], timeout=0.5):
        code = process.poll()
        if code is not None or time.monotonic() >= deadline:
            problem = f"exited with code {code}" if code is not None else "never answered"
            record["error"] = f"{problem} on start-up"
            raise StoreError(
                f"the API {problem} on start-up; see {record['log_path']}\n"
                + log_tail(Path(record["log_path"]))
            )
        time.sleep(0.1)


def check_worker_started(
    record: dict[str, Any], process: subprocess.Popen[bytes], grace: float
) -> None:
    """Fail when the worker exits within ``grace`` seconds of starting (a crash on start-up)."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            log_path = Path(record["log_path"])
            record["error"] = f"exited with code {code} on start-up"
            raise StoreError(
                f"worker {shlex.join(record['command'])} exited with code {code} on start-up; "
                f"see {log_path}\n" + log_tail(log_path)
            )
        time.sleep(0.05)
