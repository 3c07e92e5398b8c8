"""``replaybook sandbox check``: run the probes inside a sandbox exactly like a replay step's."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from pathlib import Path
from typing import Any

from activities.sandbox.bwrap import check_available, python_argv, read_only_paths, spawn
from activities.sandbox.config import SandboxSettings
from models.errors import SandboxUnavailableError

#: the keys the issue names; each must come out as the safe value for the check to pass
EXPECTED = {
    "network_blocked": True,
    "credentials_visible": False,
    "root_read_only": True,
    "tmp_writable": True,
    "cpu_limited": True,
    "memory_limited": True,
}


class _Listener:
    """A TCP port listening on the host's loopback, counting the connections it receives."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.socket.close()


async def run_check(settings: SandboxSettings, secret_paths: list[str]) -> dict[str, Any]:
    """The probes' report plus ``ok``; ``SandboxUnavailableError`` when no sandbox can be made."""
    check_available(settings)
    listener = _Listener()
    try:
        request = {
            "listening_port": listener.port,
            "secret_paths": secret_paths,
            "read_only_paths": [str(p) for p in read_only_paths()],
        }
        process = await spawn(settings, python_argv("activities.sandbox.probes"))
        out, err = await asyncio.wait_for(
            process.communicate(json.dumps(request).encode()), timeout=120
        )
    finally:
        listener.close()
    if process.returncode != 0:
        raise SandboxUnavailableError(
            f"the probes failed in the sandbox (exit {process.returncode}): "
            f"{err.decode(errors='replace').strip()[-500:]}"
        )
    report = json.loads(out)
    # measured from outside too: the host listener must not have seen the sandbox
    report["network_blocked"] = report["network_blocked"] and listener.accepted == 0
    report["details"]["network"]["host_listener_connections"] = listener.accepted
    report = {"isolation": settings.isolation, **report}
    report["ok"] = all(report[key] == value for key, value in EXPECTED.items())
    return report


def host_secret_paths(home: Path, database_url: str, artifacts: str) -> list[str]:
    """Paths on the host a sandboxed step must not see: Replaybook's home, its SQLite file and
    its local artifact directory."""
    paths = [str(home)]
    if database_url.startswith("sqlite") and ":///" in database_url:
        paths.append(database_url.split(":///", 1)[1])
    if "://" not in artifacts:
        paths.append(artifacts)
    return paths
