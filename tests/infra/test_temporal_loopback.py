"""The embedded stack's Temporal serves on loopback only: anyone who reaches its gRPC front end
or its Web UI can send workflow updates and signals (the dev server has no authentication)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from devstack.temporal_server import start_temporal_dev_server


def listening(pid: int) -> list[str]:
    """``address:port`` of every TCP socket ``pid`` listens on (``ss -ltnp``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3] for line in out.splitlines() if re.search(rf"pid={pid},", line)]


def test_every_endpoint_of_the_dev_server_listens_on_loopback(tmp_path: Path) -> None:
    server = start_temporal_dev_server(tmp_path / "temporal")  # with its Web UI
    try:
        bound = listening(server.pid)
        assert server.ui_port is not None
        ports = {int(address.rsplit(":", 1)[1]) for address in bound}
        assert {server.port, server.ui_port, server.http_port} <= ports, bound
        assert bound and all(a.startswith(("127.0.0.1:", "[::1]:")) for a in bound), bound
    finally:
        server.stop(timeout=20)
