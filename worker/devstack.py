"""The local development stack behind ``replaybook dev up | status | down``.

``up`` starts, detached from the calling process:

* the Temporal dev server (``worker.temporal_server``), its database in
  ``$REPLAYBOOK_HOME/temporal/temporal.db`` so workflows survive a ``down`` / ``up``;
* SeaweedFS (``worker.seaweedfs``) with data in ``$REPLAYBOOK_HOME/seaweedfs``, only when
  ``REPLAYBOOK_ARTIFACTS`` is an ``s3://`` URL and ``REPLAYBOOK_S3_ENDPOINT_URL`` is unset —
  the stack then owns the S3 endpoint and records it with its credentials in the state file;
* the Replaybook worker: ``python -m worker --queue all`` (``REPLAYBOOK_DEV_WORKER_COMMAND``,
  a shell-quoted command line, replaces it) with ``TEMPORAL_ADDRESS`` / ``TEMPORAL_NAMESPACE``
  pointing at the stack and, when the stack owns S3, the endpoint and credentials, and
  ``REPLAYBOOK_METRICS_PORT`` set to a free port (kept across restarts) where it serves its
  Prometheus metrics (``worker_metrics_port`` in the status);
* the HTTP API (``python -m worker.api``, see ``worker.api``) on ``--api-port`` or a free port,
  wired like the worker, with a generated token of role ``admin`` (``dev_token`` in the
  status) added to ``REPLAYBOOK_API_TOKENS``.

Logs go to ``$REPLAYBOOK_HOME/dev/<component>.log`` and the state (pids, ports, addresses,
start times) to ``$REPLAYBOOK_HOME/dev/stack.json`` (mode 0600: it holds the S3 secret).
A component is alive when its recorded pid is still that process (pid and kernel start time
match, not a zombie) and, for a server, its port accepts connections. ``up`` on a running stack
starts only the components that are not alive, on the ports they had; ``down`` stops the
workers, then Temporal, then SeaweedFS (SIGTERM to the process group, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models.errors import ConfigurationError, StoreError
from worker.ports import free_ports
from worker.processes import log_tail

STATE_VERSION = 1
STATE_FILENAME = "stack.json"
DEFAULT_TEMPORAL_PORT = 7233
DEFAULT_TEMPORAL_UI_PORT = 8233
HOST = "127.0.0.1"
WORKER_COMMAND_ENV = "REPLAYBOOK_DEV_WORKER_COMMAND"
S3_REGION = "us-east-1"

#: Components in start order.
COMPONENTS = ("temporal", "seaweedfs", "worker", "api")
#: ``down`` stops the API and the workers first, then Temporal, then the store.
STOP_ORDER = ("api", "worker", "temporal", "seaweedfs")
#: how long the API may take to import and bind its port
API_START_TIMEOUT = 30.0
#: The worker variables that point it at the stack (recorded, to notice when they change).
_WORKER_WIRING = ("TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "REPLAYBOOK_S3_ENDPOINT_URL")

Echo = Callable[[str], None]


def _no_echo(_: str) -> None:
    pass


# state ----------------------------------------------------------------------------------------


def dev_dir(home: Path | str) -> Path:
    return Path(home) / "dev"


def state_path(home: Path | str) -> Path:
    return dev_dir(home) / STATE_FILENAME


def load_stack_state(home: Path | str) -> dict[str, Any] | None:
    """The dev stack's recorded state under ``home``, or ``None`` when no stack was started there.

    The state says what was started, not that it still runs (``stack_status`` checks that).
    Keys: ``version``, ``home``, ``started_at``, ``updated_at`` and ``components``, a mapping
    ``temporal`` → ``{address, namespace, port, ui_port, ui_url, pid, …}``, ``seaweedfs`` →
    ``{endpoint_url, access_key, secret_key, region, pid, …}`` (only when the stack owns S3),
    ``worker`` → ``{pid, command, …}``.
    """
    try:
        state = json.loads(state_path(home).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("components"), dict):
        return None
    return state


def _save_state(home: Path, state: dict[str, Any]) -> None:
    state["updated_at"] = _now()
    path = state_path(home)
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def _stack_lock(home: Path) -> Iterator[None]:
    """One ``up`` or ``down`` at a time per ``home``."""
    directory = dev_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "stack.lock").open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# configuration --------------------------------------------------------------------------------


def stack_owns_s3(env: Mapping[str, str]) -> bool:
    """The stack runs SeaweedFS when artifacts go to ``s3://`` and no endpoint is configured."""
    return (env.get("REPLAYBOOK_ARTIFACTS") or "").startswith("s3://") and not env.get(
        "REPLAYBOOK_S3_ENDPOINT_URL"
    )


def default_worker_command() -> list[str]:
    return [sys.executable, "-m", "worker", "--queue", "all"]


def worker_command(env: Mapping[str, str]) -> list[str]:
    """``REPLAYBOOK_DEV_WORKER_COMMAND`` (shell-quoted) if set, else the real worker."""
    raw = env.get(WORKER_COMMAND_ENV)
    if not raw:
        return default_worker_command()
    command = shlex.split(raw)
    if not command:
        raise ConfigurationError(f"{WORKER_COMMAND_ENV} is set but empty")
    return command


# processes ------------------------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time in clock ticks)`` of ``pid`` from ``/proc``, ``None`` if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return fields[0], int(fields[19])


def process_start_ticks(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def pid_alive(pid: int | None, start_ticks: int | None = None) -> bool:
    """Whether ``pid`` runs (not a zombie) and, given ``start_ticks``, is still that process."""
    if not pid:
        return False
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return start_ticks is None or stat[1] == start_ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def port_answers(host: str, port: int | None, timeout: float = 1.0) -> bool:
    if not port:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _wait_gone(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def terminate(pid: int | None, start_ticks: int | None, timeout: float = 20.0) -> bool:
    """Stop a recorded process and its process group: SIGTERM, wait, SIGKILL.

    Every component is started with ``start_new_session=True``, so its pid is also its process
    group id. Nothing is signalled unless ``pid`` is still the recorded process
    (``start_ticks``) or, when it has exited, its group still has members: children it left
    behind (the kernel reuses no pid while a group of that id exists). Returns whether the
    recorded process itself was running.
    """
    if not pid:
        return False
    running = pid_alive(pid, start_ticks)
    has_proc = Path("/proc/self/stat").exists()
    if running:
        try:
            group = os.getpgid(pid) == pid
        except ProcessLookupError:
            return False
    else:
        stat = _proc_stat(pid) if has_proc else None
        leader_gone = stat is None or stat[0] in ("Z", "X")
        group = has_proc and leader_gone and bool(_group_members(pid))
        if not group:
            return False

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    def alive() -> bool:
        if group and has_proc:
            return bool(_group_members(pid))
        return pid_alive(pid, start_ticks)

    send(signal.SIGTERM)
    if not _wait_gone(alive, timeout):
        send(signal.SIGKILL)
        _wait_gone(alive, 5.0)
    return running


def component_status(name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """One component's recorded facts plus ``pid_alive``, ``port_answering`` and ``alive``."""
    pid = record.get("pid")
    alive_pid = pid_alive(pid, record.get("pid_start"))
    port = record.get("port")
    host = record.get("host", HOST)
    answering = port_answers(host, port) if (alive_pid and port) else None
    status: dict[str, Any] = {
        "pid": pid,
        "pid_alive": alive_pid,
        "port": port,
        "port_answering": answering,
        "alive": alive_pid and (answering is not False),
        "started_at": record.get("started_at"),
        "log_path": record.get("log_path"),
    }
    if name == "temporal":
        status |= {
            "address": record.get("address"),
            "namespace": record.get("namespace"),
            "ui_port": record.get("ui_port"),
            "ui_url": record.get("ui_url"),
        }
    elif name == "seaweedfs":
        status |= {
            "endpoint_url": record.get("endpoint_url"),
            "address": record.get("endpoint_url"),
        }
    elif name == "worker":
        status |= {
            "command": record.get("command"),
            "address": None,
            "metrics_port": record.get("metrics_port"),
        }
    elif name == "api":
        status |= {"address": record.get("url"), "url": record.get("url")}
    if record.get("error"):
        status["error"] = record["error"]
    return status


def stack_status(home: Path | str) -> dict[str, Any]:
    """What runs under ``home``: ``running`` is true when a stack is recorded and all of it lives."""
    home = Path(home)
    state = load_stack_state(home)
    components: dict[str, Any] = {}
    if state is not None:
        for name in COMPONENTS:
            record = state["components"].get(name)
            if record is not None:
                components[name] = component_status(name, record)
    recorded = {} if state is None else state["components"]
    api, worker = recorded.get("api") or {}, recorded.get("worker") or {}
    return {
        "home": str(home),
        "state_path": str(state_path(home)),
        "started_at": None if state is None else state.get("started_at"),
        "running": bool(components) and all(c["alive"] for c in components.values()),
        "components": components,
        "api_port": api.get("port"),
        "api_url": api.get("url"),
        # the embedded stack's own admin token (the state file is 0600)
        "dev_token": api.get("dev_token"),
        "worker_metrics_port": worker.get("metrics_port"),
    }


# up -------------------------------------------------------------------------------------------


@dataclass
class UpResult:
    actions: dict[str, str]  # component → "running" | "started" | "restarted"
    status: dict[str, Any]

    @property
    def changed(self) -> bool:
        return any(a != "running" for a in self.actions.values())


def stack_up(
    home: Path | str,
    *,
    env: Mapping[str, str] | None = None,
    temporal_port: int = DEFAULT_TEMPORAL_PORT,
    ui_port: int = DEFAULT_TEMPORAL_UI_PORT,
    s3_port: int | None = None,
    api_port: int | None = None,
    namespace: str | None = None,
    worker_cmd: list[str] | None = None,
    worker_grace: float = 1.0,
    echo: Echo = _no_echo,
) -> UpResult:
    """Start whatever part of the stack under ``home`` is not alive; see the module docstring.

    Raises ``ConfigurationError`` (a taken port, a bad worker command) or ``StoreError`` (a
    component failed to start); the state file records what did start, so ``down`` stops it.
    """
    env = os.environ if env is None else env
    home = Path(home).resolve()
    namespace = namespace or env.get("TEMPORAL_NAMESPACE") or "default"
    with _stack_lock(home):
        state = load_stack_state(home) or {
            "version": STATE_VERSION,
            "home": str(home),
            "started_at": _now(),
            "components": {},
        }
        components: dict[str, Any] = state["components"]
        actions: dict[str, str] = {}

        def save() -> None:
            _save_state(home, state)

        # Temporal
        record = components.get("temporal")
        if record is not None and component_status("temporal", record)["alive"]:
            actions["temporal"] = "running"
        else:
            if record is not None:
                terminate(record.get("pid"), record.get("pid_start"), timeout=10)
            port = record["port"] if record else temporal_port
            ui = record.get("ui_port", ui_port) if record else ui_port
            components["temporal"] = _start_temporal(home, port, ui, namespace)
            actions["temporal"] = "restarted" if record is not None else "started"
            save()
            echo(f"temporal: {actions['temporal']} at {components['temporal']['address']}")

        # SeaweedFS, when the stack owns S3
        record = components.get("seaweedfs")
        if record is not None and component_status("seaweedfs", record)["alive"]:
            actions["seaweedfs"] = "running"
        elif record is not None or stack_owns_s3(env):
            if record is not None:
                terminate(record.get("pid"), record.get("pid_start"), timeout=10)
            components["seaweedfs"] = _start_seaweedfs(home, record, s3_port)
            actions["seaweedfs"] = "restarted" if record is not None else "started"
            save()
            echo(f"seaweedfs: {actions['seaweedfs']} at {components['seaweedfs']['endpoint_url']}")

        # the worker, restarted too when the services it was pointed at moved
        record = components.get("worker")
        wiring = _wiring(worker_environment(home, components, env))
        if (
            record is not None
            and component_status("worker", record)["alive"]
            and record.get("wiring") == wiring
        ):
            actions["worker"] = "running"
        else:
            if record is not None:
                terminate(record.get("pid"), record.get("pid_start"), timeout=10)
            command = worker_cmd or worker_command(env)
            metrics_port = (record or {}).get("metrics_port") or free_ports(1)[0]
            new, process = _start_worker(home, command, components, env, metrics_port)
            components["worker"] = new
            actions["worker"] = "restarted" if record is not None else "started"
            try:
                _check_worker(new, process, worker_grace)
            finally:
                save()  # with the error, if it crashed
            echo(f"worker: {actions['worker']} (pid {new['pid']})")

        # the HTTP API, restarted too when the services it points at moved
        record = components.get("api")
        token = (record or {}).get("dev_token") or secrets.token_urlsafe(32)
        api_env = api_environment(home, components, env, token)
        if (
            record is not None
            and component_status("api", record)["alive"]
            and record.get("wiring") == _wiring(api_env)
        ):
            actions["api"] = "running"
        else:
            if record is not None:
                terminate(record.get("pid"), record.get("pid_start"), timeout=10)
            port = (record or {}).get("port") or api_port or free_ports(1)[0]
            new, process = _start_api(home, port, api_env, token)
            components["api"] = new
            actions["api"] = "restarted" if record is not None else "started"
            try:
                _check_api(new, process, API_START_TIMEOUT)
            finally:
                save()
            echo(f"api: {actions['api']} at {new['url']}")
        save()
    return UpResult(actions=actions, status=stack_status(home))


def _start_temporal(home: Path, port: int, ui_port: int | None, namespace: str) -> dict[str, Any]:
    from worker.temporal_server import start_temporal_dev_server

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
        "started_at": _now(),
    }


def _start_seaweedfs(
    home: Path, previous: Mapping[str, Any] | None, s3_port: int | None
) -> dict[str, Any]:
    from worker.seaweedfs import start_seaweedfs

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
        "started_at": _now(),
    }


def worker_environment(
    home: Path, components: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, str]:
    """The worker's environment: the caller's, pointed at the stack's services."""
    temporal = components["temporal"]
    out = dict(env) | {
        "REPLAYBOOK_HOME": str(home),
        "TEMPORAL_ADDRESS": temporal["address"],
        "TEMPORAL_NAMESPACE": temporal["namespace"],
    }
    s3 = components.get("seaweedfs")
    if s3 is not None:
        for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
            out.pop(key, None)
        out |= {
            "REPLAYBOOK_S3_ENDPOINT_URL": s3["endpoint_url"],
            "AWS_ACCESS_KEY_ID": s3["access_key"],
            "AWS_SECRET_ACCESS_KEY": s3["secret_key"],
            "AWS_DEFAULT_REGION": s3["region"],
        }
    return out


def _wiring(worker_env: Mapping[str, str]) -> dict[str, str | None]:
    return {key: worker_env.get(key) for key in _WORKER_WIRING}


def _start_worker(
    home: Path,
    command: list[str],
    components: Mapping[str, Any],
    env: Mapping[str, str],
    metrics_port: int,
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    log_path = dev_dir(home) / "worker.log"
    worker_env = worker_environment(home, components, env)
    worker_env["REPLAYBOOK_METRICS_PORT"] = str(metrics_port)
    with log_path.open("ab") as log:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=worker_env,
                start_new_session=True,
            )
        except OSError as e:
            raise ConfigurationError(f"cannot start worker {shlex.join(command)}: {e}") from e
    return {
        "pid": process.pid,
        "pid_start": process_start_ticks(process.pid),
        "command": command,
        "wiring": _wiring(worker_env),
        "metrics_port": metrics_port,
        "log_path": str(log_path),
        "started_at": _now(),
    }, process


def api_environment(
    home: Path, components: Mapping[str, Any], env: Mapping[str, str], token: str
) -> dict[str, str]:
    """The API's environment: the worker's wiring, plus the stack's admin token next to any
    tokens the caller configured."""
    out = worker_environment(home, components, env)
    configured = env.get("REPLAYBOOK_API_TOKENS")
    out["REPLAYBOOK_API_TOKENS"] = ",".join(filter(None, (configured, f"{token}=admin")))
    return out


def _start_api(
    home: Path, port: int, api_env: dict[str, str], token: str
) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    from worker.ports import port_is_free

    if not port_is_free(HOST, port):
        raise ConfigurationError(f"API port {HOST}:{port} is taken (choose --api-port)")
    log_path = dev_dir(home) / "api.log"
    command = [sys.executable, "-m", "worker.api", "--host", HOST, "--port", str(port)]
    with log_path.open("ab") as log:
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=api_env,
                start_new_session=True,
            )
        except OSError as e:
            raise ConfigurationError(f"cannot start the API {shlex.join(command)}: {e}") from e
    return {
        "pid": process.pid,
        "pid_start": process_start_ticks(process.pid),
        "host": HOST,
        "port": port,
        "url": f"http://{HOST}:{port}",
        "dev_token": token,
        "command": command,
        "wiring": _wiring(api_env),
        "log_path": str(log_path),
        "started_at": _now(),
    }, process


def _check_api(record: dict[str, Any], process: subprocess.Popen[bytes], timeout: float) -> None:
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


def _check_worker(record: dict[str, Any], process: subprocess.Popen[bytes], grace: float) -> None:
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


# down -----------------------------------------------------------------------------------------


def stack_down(home: Path | str, *, timeout: float = 20.0, echo: Echo = _no_echo) -> list[str]:
    """Stop the stack under ``home`` (workers, Temporal, SeaweedFS) and forget it.

    Returns the components that were running; ``[]`` (and nothing done) when none was recorded.
    """
    home = Path(home).resolve()
    with _stack_lock(home):
        state = load_stack_state(home)
        if state is None:
            return []
        stopped = []
        for name in STOP_ORDER:
            record = state["components"].get(name)
            if record is None:
                continue
            if terminate(record.get("pid"), record.get("pid_start"), timeout=timeout):
                stopped.append(name)
                echo(f"{name}: stopped (pid {record['pid']})")
            # weed leaves unix sockets named after its ports in /tmp when it is killed.
            for port in (record.get("ports") or {}).values() if name == "seaweedfs" else ():
                for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                    with contextlib.suppress(OSError):
                        sock.unlink()
        state_path(home).unlink(missing_ok=True)
    return stopped
