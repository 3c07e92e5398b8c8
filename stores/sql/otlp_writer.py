"""SQLite: an export stored in one hand-off to a dedicated ``sqlite3`` connection's thread.

The request's path of ``SqlOtlpSpans.stage`` (see ``stores.sql.otlp_spans``) is four statements
(``BEGIN IMMEDIATE``, the check that its traces are open, the export's row and its pending
mark, ``COMMIT``). Through the async driver each is several thread hops; here the whole
transaction is one function run on the writer's thread, as the ledger's batch writer does
(``stores.sql.batch_writer``), with the same pragmas and the same stored values.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from models.errors import StoreError
from stores.sql import schema
from stores.sql.batch_writer import _sqlite_insert
from stores.sql.database import Database, sqlite_pragmas

__all__ = ["CLOSED", "SqliteExportWriter", "sqlite_export_writer"]

#: ``store``'s answer when a trace of the export is no longer open (nothing written)
CLOSED = -1
_CLOSED_SQL = (
    "SELECT 1 FROM otlp_traces WHERE trace_id IN (SELECT value FROM json_each(?)) "
    "AND state <> 'open' LIMIT 1"
)


class SqliteExportWriter:
    def __init__(self, path: str) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="replaybook-otlp-writer")
        self._conn: sqlite3.Connection | None = None
        self._insert, self._params = _sqlite_insert(
            schema.otlp_exports, " ON CONFLICT (digest) DO NOTHING"
        )
        self._pending, _ = _sqlite_insert(schema.otlp_pending_exports)

    async def store(self, traces: list[str], row: dict[str, Any]) -> int | None:
        """Store the export's row (``row``: its columns but the id and the digest, made
        here) and its pending mark:
        its id; None when the same body is stored already; ``CLOSED`` when a trace of
        ``traces`` is no longer open (nothing written)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._store, json.dumps(traces), row)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # the pragmas of every pooled connection (stores.sql.database)
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            for pragma in sqlite_pragmas():
                conn.execute(pragma)
            self._conn = conn
        return self._conn

    def _store(self, traces: str, row: dict[str, Any]) -> int | None:
        # hashed here: hashlib lets go of the GIL, so the event loop goes on meanwhile
        row = {**row, "digest": hashlib.sha256(row["body"]).hexdigest()}
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute(_CLOSED_SQL, (traces,)).fetchone() is not None:
                    conn.execute("ROLLBACK")
                    return CLOSED
                inserted = conn.execute(self._insert, self._params(row))
                if inserted.rowcount != 1:
                    conn.execute("ROLLBACK")
                    return None
                export_id = inserted.lastrowid
                conn.execute(self._pending, (export_id,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc!r}") from exc
        return export_id

    async def close(self) -> None:
        def close_in_thread() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close_in_thread)
        self._executor.shutdown(wait=False)


def sqlite_export_writer(db: Database) -> SqliteExportWriter:
    """The export writer of a SQLite ``db`` (made on first use, closed by ``db.dispose()``)."""
    writer = db.owned.get("otlp_export_writer")
    if writer is None:
        path = db.engine.url.database
        assert path is not None
        writer = db.owned["otlp_export_writer"] = SqliteExportWriter(path)
    assert isinstance(writer, SqliteExportWriter)
    return writer
