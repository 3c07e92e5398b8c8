"""``replaybook sandbox check --json``: the probes run inside the sandbox and measure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPLAYBOOK = Path(sys.executable).parent / "replaybook"


def check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "REPLAYBOOK_HOME": str(tmp_path / "home"),
        # a credential in the worker's environment must not reach the sandbox
        "AWS_SECRET_ACCESS_KEY": "not-for-sandboxes",
        **env,
    }
    return subprocess.run(
        [str(REPLAYBOOK), "sandbox", "check", "--json"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=180,
    )


def test_check_reports_every_property_as_measured(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "replaybook.db").write_text("evidence")
    done = check(tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["isolation"] == "bubblewrap" and report["ok"] is True
    assert report["network_blocked"] is True
    assert report["credentials_visible"] is False
    assert report["root_read_only"] is True
    assert report["tmp_writable"] is True
    assert report["cpu_limited"] is True
    assert report["memory_limited"] is True
    details = report["details"]
    # measured, not assumed: the attempts and their results are in the report
    assert details["network"]["interfaces"] == ["lo"]
    assert details["network"]["host_listener_connections"] == 0
    assert details["cpu"]["spinner_killed_by"] in ("SIGXCPU", "SIGKILL")
    assert details["memory"]["allocating_10_gib"] == "refused (MemoryError)"
    assert details["credentials"]["env"] == [] and details["credentials"]["files"] == []
    assert details["writable"]["/tmp"] is True and details["writable"]["/usr"] is False
    assert details["uid"] != 0
    assert report["processes_limited"] is True
    assert 0 < details["processes"]["forked_before_refusal"] < 4 * 64


def test_check_reflects_the_configured_limits(tmp_path: Path) -> None:
    done = check(
        tmp_path,
        REPLAYBOOK_SANDBOX_MEMORY_BYTES=str(1536 * 1024**2),
        REPLAYBOOK_SANDBOX_MAX_PROCESSES="16",
    )
    assert done.returncode == 0, done.stderr
    details = json.loads(done.stdout)["details"]
    assert details["memory"]["rlimit_address_space_bytes"] == 1536 * 1024**2
    assert details["processes"]["rlimit_nproc"] == 16
    assert details["processes"]["forked_before_refusal"] < 16


def test_check_fails_clearly_when_no_sandbox_can_be_created(tmp_path: Path) -> None:
    done = check(tmp_path, REPLAYBOOK_BWRAP="/nonexistent/bwrap")
    assert done.returncode == 4
    assert "bubblewrap" in done.stderr and "not installed" in done.stderr


def test_check_refuses_when_the_sandbox_is_switched_off(tmp_path: Path) -> None:
    done = check(tmp_path, REPLAYBOOK_SANDBOX="off")
    assert done.returncode == 2
    assert "development flag" in done.stderr
