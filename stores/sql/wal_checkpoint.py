"""WAL checkpoints of a SQLite database off its batch writer's commits.

SQLite checkpoints its write-ahead log from inside the commit that takes it past
``wal_autocheckpoint`` pages (1,000 by default): that commit copies the log into the database
file and fsyncs both. On the recording path it was the slow commit a write call's durable point
waited for — 6-8 ms against about 1 ms for the others, the p99 of recorded calls (issue 35
item 7). So the batch writer's connection turns that off (``PRAGMA wal_autocheckpoint=0``) and
this checkpointer runs a ``PASSIVE`` checkpoint on a connection and thread of its own every
``CHECKPOINT_EVERY_COMMITS`` of the writer's commits. A passive checkpoint waits for no reader
or writer: the writer's next commits go on beside it, and once it has copied the whole log the
next transaction starts the log again from its beginning (the file stays its size). The pooled
connections keep SQLite's own checkpoint, which is then rarely reached.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from stores.sql.database import sqlite_pragmas

__all__ = ["CHECKPOINT_EVERY_COMMITS", "WalCheckpointer"]

log = structlog.get_logger(__name__)

#: writer commits between two background checkpoints: a batch writes a few pages (events, their
#: indexes, the run's head), so the log stays well under SQLite's own 1,000-page threshold
CHECKPOINT_EVERY_COMMITS = 64


class WalCheckpointer:
    """Checkpoints ``path``'s WAL in the background; ``committed`` is called by the writer's
    thread after each commit, ``close`` once the writer is closed."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="replaybook-sqlite-checkpoint")
        self._conn: sqlite3.Connection | None = None
        self._commits = 0
        #: set while a checkpoint is queued or running (the writer never queues a second)
        self._running = threading.Event()
        #: checkpoints run (tests count them)
        self.checkpoints = 0

    def committed(self) -> None:
        """One more commit by the writer: every ``CHECKPOINT_EVERY_COMMITS``, start a
        checkpoint unless one is still running."""
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY_COMMITS and not self._running.is_set():
            self._commits = 0
            self._running.set()
            self._executor.submit(self._checkpoint)

    def _checkpoint(self) -> None:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(self._path, isolation_level=None)
                for pragma in sqlite_pragmas(foreign_keys=False):  # as every connection's
                    self._conn.execute(pragma)
            self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.checkpoints += 1
        except sqlite3.Error as exc:  # the next one tries again; SQLite's own still may run
            log.warning("sqlite wal checkpoint failed", path=self._path, error=repr(exc))
        finally:
            self._running.clear()

    def idle(self) -> Future[None]:
        """Resolves once the checkpoint queued or running now (if any) has ended."""
        return self._executor.submit(lambda: None)

    def close(self) -> Future[None]:
        """Close the checkpoint connection once a checkpoint in progress has ended."""

        def close_in_thread() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        done = self._executor.submit(close_in_thread)
        self._executor.shutdown(wait=False)
        return done
