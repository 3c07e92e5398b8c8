"""The sandbox's mounts, run for real: a checkout that lives under /tmp (as CI clones often do)
stays readable, read-only, on top of the private /tmp instead of being hidden by it."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from activities.sandbox import bwrap
from activities.sandbox.config import SandboxSettings


def test_code_under_tmp_is_bound_read_only_over_the_private_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        _check_checkout_under_tmp(Path(tmp) / "checkout", monkeypatch)


def _check_checkout_under_tmp(code: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code.mkdir()
    (code / "marker.txt").write_text("visible")
    default = bwrap.read_only_paths
    monkeypatch.setattr(bwrap, "read_only_paths", lambda: [*default(), code])
    command = bwrap.bwrap_command(
        SandboxSettings(),
        [
            "/bin/sh",
            "-c",
            f"cat {code}/marker.txt; echo; touch {code}/x 2>/dev/null && echo writable || "
            "echo read-only; touch /tmp/mine && echo tmp-writable",
        ],
    )
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["visible", "read-only", "tmp-writable"]
    assert not (code / "x").exists()
