"""The threads that write local artifacts (``LocalArtifactStore.put``).

Shared by every local store of the process: the file and directory fsyncs of puts made
together overlap (the filesystem's journal commits coalesce them). A put of bytes already
being written waits for that write instead of finding the renamed file and returning before
its directory is synced (durable only then), and writes nothing of its own.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future

__all__ = ["WRITER_THREADS", "Written", "write_soon", "writing"]

#: writer threads (a put spends most of its time in fsync, with the GIL released)
WRITER_THREADS = 8


class Written(Future[str]):
    """The future of one write. It cannot be cancelled: several callers may wait for the
    same write, and a write once queued is carried out (one nobody waits for any more is
    harmless: content-addressed, written to a temporary file and renamed)."""

    def cancel(self) -> bool:
        return False


#: a queued write: its future, the write, and its key
_Job = tuple[Written, Callable[[], str], str]


class _Writers:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        #: the writes queued or in progress, by key
        self._writing: dict[str, Written] = {}
        self._started = False

    def submit(self, key: str, write: Callable[[], str]) -> Written:
        with self._lock:
            pending = self._writing.get(key)
            if pending is not None:
                return pending
            if not self._started:
                self._start()
            future = self._writing[key] = Written()
        self._queue.put((future, write, key))
        return future

    def writing(self, key: str) -> Written | None:
        with self._lock:
            return self._writing.get(key)

    def _start(self) -> None:
        # daemon threads: a write cut short at exit was never reported durable, and leaves
        # at most a temporary file
        for i in range(WRITER_THREADS):
            threading.Thread(
                target=self._work, name=f"replaybook-artifacts-{i}", daemon=True
            ).start()
        self._started = True

    def _work(self) -> None:
        jobs = self._queue  # a forked child makes threads of its own, for a queue of its own
        while True:
            future, write, key = jobs.get()
            future.set_running_or_notify_cancel()
            result, error = "", None
            try:
                result = write()
            except BaseException as exc:  # reported to whoever waits for the write
                error = exc
            # forgotten before its waiters wake: a waiter that then puts the same key again
            # (its copy corrupted since) must get a new write, not this finished one (seen: a
            # repair put returned the old future and wrote nothing, when this thread lost the
            # CPU between the result and the lock)
            with self._lock:
                if self._writing.get(key) is future:
                    del self._writing[key]
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)


_writers = _Writers()
# a forked child has none of its parent's threads (nor may it take a lock one of them held)
os.register_at_fork(after_in_child=_writers._reset)


def write_soon(key: str, write: Callable[[], str]) -> Written:
    """Queue ``write`` (returning what the future resolves to) for a writer thread, unless the
    write of ``key`` is queued or in progress already: then the future of that one."""
    return _writers.submit(key, write)


def writing(key: str) -> Written | None:
    """The write of ``key`` queued or in progress, if any (once its future is done and it is
    forgotten, what it wrote is durable)."""
    return _writers.writing(key)
