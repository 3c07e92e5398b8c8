"""The local development stack behind ``replaybook dev up | status | down``.

``up`` starts, detached from the calling process:

* the Temporal dev server (``devstack.temporal_server``), its database in
  ``$REPLAYBOOK_HOME/temporal/temporal.db`` so workflows survive a ``down`` / ``up``;
* SeaweedFS (``devstack.seaweedfs``) with data in ``$REPLAYBOOK_HOME/seaweedfs``, only when
  ``REPLAYBOOK_ARTIFACTS`` is an ``s3://`` URL and ``REPLAYBOOK_S3_ENDPOINT_URL`` is unset —
  the stack then owns the S3 endpoint and records it with its credentials in the state file;
* the local model server (``devstack.model_server``: ``llama_cpp.server`` serving
  ``smollm2-135m`` and ``gemma3-270m``) on a free port kept across restarts, unless
  ``REPLAYBOOK_LOCAL_MODELS=off``; its URL (``REPLAYBOOK_LOCAL_MODELS_URL``) registers the local
  models in the worker's and the CLI's model registry;
* the Replaybook worker: ``python -m worker --queue all`` (``REPLAYBOOK_DEV_WORKER_COMMAND``,
  a shell-quoted command line, replaces it) with ``TEMPORAL_ADDRESS`` / ``TEMPORAL_NAMESPACE``
  pointing at the stack and, when the stack owns S3, the endpoint and credentials, and
  ``REPLAYBOOK_METRICS_PORT`` set to a free port (kept across restarts) where it serves its
  Prometheus metrics (``worker_metrics_port`` in the status);
* the HTTP API (``python -m api``, see ``api``) on ``--api-port`` or a free port,
  wired like the worker, with a generated token of role ``admin`` (``dev_token`` in the
  status) added to ``REPLAYBOOK_API_TOKENS``.

Logs go to ``$REPLAYBOOK_HOME/dev/<component>.log`` and the state (pids, ports, addresses,
start times) to ``$REPLAYBOOK_HOME/dev/stack.json`` (mode 0600: it holds the S3 secret). With
each state the stack's addresses go to ``$REPLAYBOOK_HOME/dev/env`` (dotenv, mode 0600), the
file the CLI reads below its environment to find the stack (``cli.common.load_settings``);
``down`` removes both.
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
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from devstack.components import (
    HOST,
    api_environment,
    check_api_started,
    check_worker_started,
    dev_dir,
    dev_env_path,
    launch_api,
    launch_seaweedfs,
    launch_temporal,
    launch_worker,
    now_iso,
    worker_environment,
    worker_wiring,
    write_dev_env,
)
from devstack.ports import DEFAULT_TEMPORAL_PORT, DEFAULT_TEMPORAL_UI_PORT, free_ports
from devstack.processes import pid_alive, port_answers, terminate
from models.errors import ConfigurationError, StoreError
from runtime.env_values import positive_int

STATE_VERSION = 1
STATE_FILENAME = "stack.json"
WORKER_COMMAND_ENV = "REPLAYBOOK_DEV_WORKER_COMMAND"

#: Components in start order.
COMPONENTS = ("temporal", "seaweedfs", "models", "worker", "api")
#: ``down`` stops the API and the workers first, then Temporal, then the store.
STOP_ORDER = ("api", "worker", "models", "temporal", "seaweedfs")
#: how long the API may take to import and bind its port
API_START_TIMEOUT = 30.0

Echo = Callable[[str], None]


def _no_echo(_: str) -> None:
    pass


# state ----------------------------------------------------------------------------------------


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
    state["updated_at"] = now_iso()
    path = state_path(home)
    tmp = path.with_suffix(".json.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    write_dev_env(home, state["components"])


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
    elif name == "models":
        status |= {
            "address": record.get("base_url"),
            "models": record.get("models"),
            "tool_calls": record.get("tool_calls"),
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
        # the web console, served by the API process (api/ui)
        "ui_url": f"{api['url']}/ui/" if api.get("url") else None,
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


class StackPorts(TypedDict, total=False):
    """Keyword arguments of ``stack_up``: the ports set in the environment."""

    temporal_port: int
    ui_port: int
    api_port: int


def stack_ports(env: Mapping[str, str]) -> StackPorts:
    """The ports ``dev up`` takes from the environment (the same variables as its options), for
    callers that start the stack without the CLI, such as ``replaybook demo``."""
    names: dict[Literal["temporal_port", "ui_port", "api_port"], str] = {
        "temporal_port": "REPLAYBOOK_TEMPORAL_PORT",
        "ui_port": "REPLAYBOOK_TEMPORAL_UI_PORT",
        "api_port": "REPLAYBOOK_API_PORT",
    }
    ports = StackPorts()
    for arg, var in names.items():
        if env.get(var):
            ports[arg] = positive_int(env, var, 0, what="a port number")
    return ports


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
            "started_at": now_iso(),
            "components": {},
        }
        components: dict[str, Any] = state["components"]
        actions: dict[str, str] = {}

        def save() -> None:
            _save_state(home, state)

        actions["temporal"] = _up_temporal(
            home, components, temporal_port, ui_port, namespace, save, echo
        )
        seaweedfs = _up_seaweedfs(home, components, env, s3_port, save, echo)
        if seaweedfs is not None:
            actions["seaweedfs"] = seaweedfs
        models = _up_models(home, components, env, save, echo)
        if models is not None:
            actions["models"] = models
        actions["worker"] = _up_worker(home, components, env, worker_cmd, worker_grace, save, echo)
        actions["api"] = _up_api(home, components, env, api_port, save, echo)
        save()
    return UpResult(actions=actions, status=stack_status(home))


def _up_temporal(
    home: Path,
    components: dict[str, Any],
    temporal_port: int,
    ui_port: int,
    namespace: str,
    save: Callable[[], None],
    echo: Echo,
) -> str:
    """Temporal's action: ``running``, or (re)started on the ports it had."""
    record = components.get("temporal")
    if record is not None and component_status("temporal", record)["alive"]:
        return "running"
    if record is not None:
        terminate(record.get("pid"), record.get("pid_start"), timeout=10)
    port = record["port"] if record else temporal_port
    ui = record.get("ui_port", ui_port) if record else ui_port
    components["temporal"] = launch_temporal(home, port, ui, namespace)
    action = "restarted" if record is not None else "started"
    save()
    echo(f"temporal: {action} at {components['temporal']['address']}")
    return action


def _up_seaweedfs(
    home: Path,
    components: dict[str, Any],
    env: Mapping[str, str],
    s3_port: int | None,
    save: Callable[[], None],
    echo: Echo,
) -> str | None:
    """SeaweedFS's action: ``running``, (re)started, or None when the stack does not own S3."""
    record = components.get("seaweedfs")
    if record is not None and component_status("seaweedfs", record)["alive"]:
        return "running"
    if record is None and not stack_owns_s3(env):
        return None
    if record is not None:
        terminate(record.get("pid"), record.get("pid_start"), timeout=10)
    components["seaweedfs"] = launch_seaweedfs(home, record, s3_port)
    action = "restarted" if record is not None else "started"
    save()
    echo(f"seaweedfs: {action} at {components['seaweedfs']['endpoint_url']}")
    return action


def _up_models(
    home: Path,
    components: dict[str, Any],
    env: Mapping[str, str],
    save: Callable[[], None],
    echo: Echo,
) -> str | None:
    """The local model server's action: ``running``, (re)started on the port it had, or None
    when ``REPLAYBOOK_LOCAL_MODELS=off``."""
    from devstack.model_server import launch_model_server, local_models_enabled

    record = components.get("models")
    if not local_models_enabled(env):
        if record is not None:  # turned off since: stop it, and the worker forgets its URL
            terminate(record.get("pid"), record.get("pid_start"), timeout=10)
            del components["models"]
            save()
        return None
    if record is not None and component_status("models", record)["alive"]:
        return "running"
    if record is not None:
        terminate(record.get("pid"), record.get("pid_start"), timeout=10)
    port = (record or {}).get("port") or free_ports(1)[0]
    try:
        components["models"] = launch_model_server(home, port, env)
    except StoreError:
        components.pop("models", None)
        save()
        raise
    action = "restarted" if record is not None else "started"
    save()
    echo(
        f"models: {action} at {components['models']['base_url']} ({', '.join(components['models']['models'])})"
    )
    return action


def _up_worker(
    home: Path,
    components: dict[str, Any],
    env: Mapping[str, str],
    worker_cmd: list[str] | None,
    worker_grace: float,
    save: Callable[[], None],
    echo: Echo,
) -> str:
    """The worker's action: ``running``, or (re)started, also when the services it was
    pointed at moved."""
    record = components.get("worker")
    wiring = worker_wiring(worker_environment(home, components, env))
    if (
        record is not None
        and component_status("worker", record)["alive"]
        and record.get("wiring") == wiring
    ):
        return "running"
    if record is not None:
        terminate(record.get("pid"), record.get("pid_start"), timeout=10)
    command = worker_cmd or worker_command(env)
    metrics_port = (record or {}).get("metrics_port") or free_ports(1)[0]
    new, process = launch_worker(home, command, components, env, metrics_port)
    components["worker"] = new
    action = "restarted" if record is not None else "started"
    try:
        check_worker_started(new, process, worker_grace)
    finally:
        save()  # with the error, if it crashed
    echo(f"worker: {action} (pid {new['pid']})")
    return action


def _up_api(
    home: Path,
    components: dict[str, Any],
    env: Mapping[str, str],
    api_port: int | None,
    save: Callable[[], None],
    echo: Echo,
) -> str:
    """The HTTP API's action: ``running``, or (re)started, also when the services it points
    at moved."""
    record = components.get("api")
    token = (record or {}).get("dev_token") or secrets.token_urlsafe(32)
    api_env = api_environment(home, components, env, token)
    if (
        record is not None
        and component_status("api", record)["alive"]
        and record.get("wiring") == worker_wiring(api_env)
    ):
        return "running"
    if record is not None:
        terminate(record.get("pid"), record.get("pid_start"), timeout=10)
    port = (record or {}).get("port") or api_port or free_ports(1)[0]
    new, process = launch_api(home, port, api_env, token)
    components["api"] = new
    action = "restarted" if record is not None else "started"
    try:
        check_api_started(new, process, API_START_TIMEOUT)
    finally:
        save()
    echo(f"api: {action} at {new['url']}")
    return action


# down -----------------------------------------------------------------------------------------


def stack_down(home: Path | str, *, timeout: float = 20.0, echo: Echo = _no_echo) -> list[str]:
    """Stop the stack under ``home`` (workers, Temporal, SeaweedFS) and forget it.

    Returns the components that were running; ``[]`` (and nothing done) when none was recorded.
    """
    home = Path(home).resolve()
    with _stack_lock(home):
        state = load_stack_state(home)
        if state is None:
            dev_env_path(home).unlink(missing_ok=True)  # a stale one, without a stack
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
        dev_env_path(home).unlink(missing_ok=True)
    return stopped
