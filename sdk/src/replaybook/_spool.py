"""A run's spool file: its header and events, one JSON document a line, appended by the agent
and read back by the sender.

Every event goes to the run's file before anything else happens to it, so the file is the
queue: memory holds no event (bounded however long the server is down), a killed process
loses nothing the operating system was given, and what the server has taken is remembered
by an acknowledged offset beside it (``<run>.ack``). A write-ahead intent is also fsync'ed,
with everything before it, before its tool runs. The owning process holds an exclusive
``flock`` on the file: another process (the next start, ``replaybook-sdk flush``) takes over
only the files of processes that are gone.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process ownership
    fcntl = None  # type: ignore[assignment]

SUFFIX = ".jsonl"
ACK_SUFFIX = ".ack"
REFUSED_DIR = "refused"


@dataclass(frozen=True)
class Item:
    """One spooled line: ``kind`` ``"h"`` (the run header) or ``"e"`` (an event), and its JSON
    text (sent as it is: the sender never parses an event, so it holds the interpreter's lock
    as little as it can while the agent runs)."""

    kind: str
    body: bytes
    #: the file offset just after this line
    end: int

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


def encode(kind: str, body: dict[str, Any]) -> bytes:
    """A line: the kind's letter, the JSON document, a newline (JSON text has no raw newline)."""
    return (
        kind.encode() + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    )


class RunSpool:
    def __init__(self, path: Path, fd: int, acked: int) -> None:
        self.path = path
        self.run_id = path.name[: -len(SUFFIX)]
        self._fd = fd
        self._lock = threading.Lock()
        self.written = os.fstat(fd).st_size
        self.acked = acked
        #: the run's end was spooled (by this process); adopted files count as ended
        self.ended = False
        self.closed = False
        self._dir_synced = False

    @classmethod
    def create(cls, directory: Path, run_id: str) -> RunSpool:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{run_id}{SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        if not _lock(fd):
            os.close(fd)
            raise RuntimeError(f"run {run_id!r} is being recorded by another process")
        return cls(path, fd, _read_ack(path))

    @classmethod
    def adopt(cls, path: Path) -> RunSpool | None:
        """The spool of a process that is gone (its lock is free), or None."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            return None
        if not _lock(fd):
            os.close(fd)
            return None
        spool = cls(path, fd, _read_ack(path))
        spool.ended = True  # nobody appends to it any more
        return spool

    def append(self, kind: str, body: dict[str, Any], durable: bool = False) -> None:
        data = encode(kind, body)
        with self._lock:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            self.written += len(data)
            if durable:
                _sync(self._fd)
                if not self._dir_synced:  # the file's own entry must survive too
                    _fsync_dir(self.path.parent)
                    self._dir_synced = True

    @property
    def pending(self) -> bool:
        return self.acked < self.written

    def read(self, max_events: int, max_bytes: int) -> list[Item]:
        """The complete lines after the acknowledged offset, at most ``max_events`` and about
        ``max_bytes`` (one longer line is read whole)."""
        items: list[Item] = []
        size = 0
        with open(self.path, "rb") as file:
            file.seek(self.acked)
            offset = self.acked
            while len(items) < max_events and (size < max_bytes or not items):
                line = file.readline()
                if not line.endswith(b"\n"):
                    break  # the end, or a line still being written
                offset += len(line)
                size += len(line)
                items.append(Item(chr(line[0]), line[1:-1], offset))
        return items

    def acknowledge(self, offset: int) -> None:
        """The server holds everything before ``offset``."""
        self.acked = offset
        tmp = self.path.with_suffix(ACK_SUFFIX + ".tmp")
        tmp.write_text(str(offset))
        os.replace(tmp, self.path.with_suffix(ACK_SUFFIX))

    def close(self, delete: bool) -> None:
        """Release the file; ``delete``: the server holds all of it."""
        if self.closed:
            return
        self.closed = True
        if delete:
            for path in (self.path, self.path.with_suffix(ACK_SUFFIX)):
                path.unlink(missing_ok=True)
        os.close(self._fd)  # releases the lock

    def set_aside(self) -> Path:
        """Move a spool the server refused to ``refused/`` (kept for a person to look at)."""
        target_dir = self.path.parent / REFUSED_DIR
        target_dir.mkdir(exist_ok=True)
        target = target_dir / self.path.name
        os.replace(self.path, target)
        self.path.with_suffix(ACK_SUFFIX).unlink(missing_ok=True)
        self.close(delete=False)
        return target


def spool_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(directory.glob(f"*{SUFFIX}"))


def _read_ack(path: Path) -> int:
    try:
        return int(path.with_suffix(ACK_SUFFIX).read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def _lock(fd: int) -> bool:
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


#: the data and the size of the file (an append changes it), not its other metadata
_sync = getattr(os, "fdatasync", os.fsync)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
