"""infra/prometheus-rules.yml in a real Prometheus (Debian's ``prometheus`` package): a series
that carries ``run_id`` fires an alert that carries it, which is what the alert intake needs
(issue 30, item 5). ``make test`` installs the package (``infra/ensure-debian-tools.sh``)."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from devstack.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus-rules.yml"
PROMETHEUS = shutil.which("prometheus")


EXPOSED = b'agent_run_failed{run_id="run-9182",agent="support-desk"} 1\nagent_up 1\n'


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(EXPOSED)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    target = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    (port,) = free_ports(1)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: agent\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target.server_address[1]}']}}]\n"
    )
    assert PROMETHEUS, "Debian's prometheus package is not installed (make test installs it)"
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=20)
        target.shutdown()


def test_the_shipped_rule_fires_an_alert_that_names_the_run(prometheus: str) -> None:
    deadline = time.monotonic() + 60
    firing: list[dict] = []
    while time.monotonic() < deadline and not firing:
        try:
            alerts = httpx.get(f"{prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        except httpx.HTTPError:
            alerts = []  # not listening yet
        firing = [a for a in alerts if a["state"] == "firing"]
        time.sleep(0.5)
    assert firing, "the rule never fired"
    (alert,) = firing
    assert alert["labels"]["alertname"] == "AgentRunFailed"
    assert alert["labels"]["run_id"] == "run-9182"
    assert alert["labels"]["agent"] == "support-desk"
