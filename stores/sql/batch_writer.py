"""One database round trip per group-commit transaction, beside SQLAlchemy's pool.

The ledger's writer hands a linked batch (its heads to move by compare-and-set, and the rows
of every table it writes) to the database's batch writer:

* SQLite: the whole transaction (``BEGIN IMMEDIATE``, every ``executemany``, ``COMMIT``) is one
  function run on the writer connection's own thread — one hand-off, instead of several
  thread hops per statement through the async driver.
* PostgreSQL: one prepared statement on a dedicated connection, in its own implicit
  transaction: the heads move in a data-modifying CTE (``UPDATE … FROM unnest(…)``, the
  compare-and-set) and every table's rows go in with ``INSERT … SELECT FROM unnest(…)`` for the
  runs whose head moved. Arrays keep the statement text fixed, so it is prepared once.

Both write plain inserts, except for mutable records (a side effect's status): one row per key
and batch (``projections.plain_insert_rows``), inserted or updated as the general path would
(``_upsert_clause``). A row whose key is taken (a record already recorded, a stale head's
sequence, a side effect of another run) fails the transaction with ``NeedsGeneralPath`` and
nothing is written; the ledger then writes the batch down its general path, which reads the
locked heads and decides record by record. A run whose head moved elsewhere is returned:
nothing of it is written (PostgreSQL writes the other runs of the batch; SQLite none).

The data subjects a batch's runs learned of (``FastBatch.subjects``) go in the same
transaction, each registered in the governance log when it is new to its run, as the general
path does (``privacy_subjects.insert_subjects_if_absent``): SQLite in the same call (it holds
the write lock); PostgreSQL in a transaction of four statements on the same connection — the
heads and rows, then the governance log's advisory lock (after the run rows, in the general
path's order: no deadlock), the subjects not there yet, the log's head and its new entries. A
batch whose head moved elsewhere writes nothing there, on either database.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Integer, LargeBinary, String, Table
from sqlalchemy.dialects import sqlite as sqlite_dialect

from models.canonical import canonicalize
from models.errors import StoreError
from stores.sql import schema
from stores.sql.database import (
    _UNAVAILABLE,
    CONNECT_TIMEOUT_SECONDS,
    Database,
    _store_error,
    sqlite_pragmas,
)
from stores.sql.governance import GOVERNANCE_LOCK, governance_log_rows
from stores.sql.privacy_subjects import subject_entries
from stores.sql.projections import CHANGED_IN_BATCH, MUTABLE_TABLES, mutable_key_column
from stores.sql.views import RUN_EVIDENCE_TABLES
from stores.sql.wal_checkpoint import WalCheckpointer

__all__ = ["POSTGRES_LANES", "BatchWriter", "FastBatch", "NeedsGeneralPath", "batch_writer"]

#: PostgreSQL transactions a batch writer keeps in flight at once (its connections); the
#: ledger's group commit splits runs over as many lanes. One: every append queued while a
#: transaction commits goes into the next, so each WAL flush carries all of them. With two,
#: the second lane's commit usually reached the server during the first one's flush and
#: waited for a flush of its own (PostgreSQL flushes the WAL one flush at a time): half the
#: appends per flush, and 8 awaiting writers swung between 2,000 and 10,800 ev/s from round to
#: round where one lane gave 6,200-10,600 (docs/performance.md, issue 35 item 6)
POSTGRES_LANES = 1


class NeedsGeneralPath(Exception):
    """A row of the batch conflicts with what is stored (nothing was written): the batch must
    be written by the general path, which looks at what is there."""


@dataclass
class FastBatch:
    """One transaction's writes: ``moves`` are (run_id, head sequence expected, new head
    sequence, new head hash); ``rows`` the rows of each table (columns absent from a row are
    NULL; JSON columns hold JSON text)."""

    moves: list[tuple[str, int, int, str]]
    rows: dict[Table, list[dict[str, Any]]] = field(default_factory=dict)
    #: rows of runs started by this batch, with their heads after it (no move): a run that
    #: exists already fails the batch with ``NeedsGeneralPath``
    new_runs: list[dict[str, Any]] = field(default_factory=list)
    #: ``data_keys`` rows of the runs started by this batch (``SqlRawVault.new_run_key``)
    new_keys: list[dict[str, Any]] = field(default_factory=list)
    #: ``run_subjects`` rows of people the runs learned of: inserted unless there already,
    #: each inserted one registered in the governance log at ``registered_at``
    subjects: list[dict[str, Any]] = field(default_factory=list)
    registered_at: datetime | None = None


def _subject_entries_rows(
    batch: FastBatch, inserted: list[dict[str, Any]], head: tuple[int, str] | None
) -> list[dict[str, Any]]:
    """The governance log rows registering ``inserted`` subjects after the log's ``head``,
    their record as canonical JSON text (what both writers bind JSON columns with)."""
    assert batch.registered_at is not None
    rows = governance_log_rows(head, subject_entries(inserted, batch.registered_at))
    for row in rows:
        row["record"] = canonicalize(row["record"]).decode()
    return rows


#: what a batch writer may write: the events, the raw payload metadata and the lookup tables
FAST_TABLES: tuple[Table, ...] = (
    schema.execution_events,
    schema.raw_payloads,
    *RUN_EVIDENCE_TABLES,
    schema.run_subjects,
)
#: tables whose rows are inserted unless their key is there already (a run's data subjects)
IF_ABSENT_TABLES: tuple[Table, ...] = (schema.run_subjects,)
_DO_NOTHING = " ON CONFLICT DO NOTHING"

#: observers of the statements a writer sends, one call per transaction: the statements
#: and whether it committed (tests count them)
Observer = Callable[[Sequence[str], bool], None]


class BatchWriter:
    """A database's batch writer (``batch_writer(db)``); ``write`` returns the runs whose head
    had moved (nothing of them written)."""

    def __init__(self) -> None:
        self.observers: list[Observer] = []

    async def write(self, batch: FastBatch) -> set[str]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    def _notify(self, statements: Sequence[str], committed: bool) -> None:
        for observer in self.observers:
            observer(statements, committed)


def batch_writer(db: Database) -> BatchWriter:
    """The batch writer of ``db`` (made on first use, closed by ``db.dispose()``)."""
    writer = db.owned.get("batch_writer")
    if writer is None:
        writer = PostgresBatchWriter(db) if db.is_postgresql else SqliteBatchWriter(db)
        db.owned["batch_writer"] = writer
    assert isinstance(writer, BatchWriter)
    return writer


# SQLite --------------------------------------------------------------------------------------


class SqliteBatchWriter(BatchWriter):
    """A dedicated ``sqlite3`` connection used by one thread only: a batch is one call."""

    _MOVE = (
        "UPDATE runs SET head_sequence = ?, head_hash = ? WHERE run_id = ? AND head_sequence = ?"
    )

    def __init__(self, db: Database) -> None:
        super().__init__()
        path = db.engine.url.database
        assert path is not None
        self._path = path
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="replaybook-sqlite-writer")
        self._conn: sqlite3.Connection | None = None
        #: checkpoints the WAL beside the commits, not inside one of them
        self.checkpointer = WalCheckpointer(path)
        self._inserts = {
            table: _sqlite_insert(table, _DO_NOTHING if table in IF_ABSENT_TABLES else "")
            for table in (schema.runs, schema.data_keys, *FAST_TABLES, schema.governance_log)
        }
        #: mutable tables: (upsert when the stored content differs, upsert whatever is stored)
        self._upserts = {
            table: (
                _sqlite_insert(table, _upsert_clause(table, changed=False)),
                _sqlite_insert(table, _upsert_clause(table, changed=True)),
            )
            for table in MUTABLE_TABLES
        }

    async def write(self, batch: FastBatch) -> set[str]:
        loop = asyncio.get_running_loop()
        moved_elsewhere, statements = await loop.run_in_executor(
            self._executor, self._write_in_thread, batch
        )
        self._notify(statements, not moved_elsewhere)
        return moved_elsewhere

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # the pragmas of every pooled connection (stores.sql.database.install_sqlite_pragmas)
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            for pragma in sqlite_pragmas():
                conn.execute(pragma)
            # its commits never checkpoint the WAL: ``self.checkpointer`` does, beside them
            conn.execute("PRAGMA wal_autocheckpoint=0")
            self._conn = conn
        return self._conn

    def _write_in_thread(self, batch: FastBatch) -> tuple[set[str], list[str]]:
        conn = self._connection()
        statements = ["BEGIN IMMEDIATE"]
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {exc!r}") from exc
        try:
            if batch.new_runs:
                sql, to_params = self._inserts[schema.runs]
                conn.executemany(sql, map(to_params, batch.new_runs))
                statements.append(sql)
            if batch.new_keys:
                sql, to_params = self._inserts[schema.data_keys]
                conn.executemany(sql, map(to_params, batch.new_keys))
                statements.append(sql)
            if batch.moves:
                statements.append(self._MOVE)
                moved = conn.executemany(
                    self._MOVE,
                    [(new, head, run_id, old) for run_id, old, new, head in batch.moves],
                ).rowcount
                if moved != len(batch.moves):
                    conn.execute("ROLLBACK")
                    return {run_id for run_id, *_ in batch.moves}, [*statements, "ROLLBACK"]
            for table, rows in batch.rows.items():
                if not rows:
                    continue
                if table not in self._upserts:
                    parts = [(self._inserts[table], rows)]
                else:
                    when_differs, always = self._upserts[table]
                    parts = [
                        (when_differs, [r for r in rows if not r[CHANGED_IN_BATCH]]),
                        (always, [r for r in rows if r[CHANGED_IN_BATCH]]),
                    ]
                for (sql, to_params), part in parts:
                    if part:
                        conn.executemany(sql, map(to_params, part))
                        statements.append(sql)
            if batch.subjects:
                statements.extend(self._register_subjects(conn, batch))
            conn.execute("COMMIT")
            self.checkpointer.committed()
        except sqlite3.IntegrityError as exc:
            conn.execute("ROLLBACK")
            raise NeedsGeneralPath(str(exc)) from exc
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"database error: {exc!r}") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return set(), [*statements, "COMMIT"]

    def _register_subjects(self, conn: sqlite3.Connection, batch: FastBatch) -> list[str]:
        """Insert the subjects not there yet and register those in the governance log (this
        transaction holds the write lock: the log's head read here stays its head)."""
        sql, to_params = self._inserts[schema.run_subjects]
        inserted = [row for row in batch.subjects if conn.execute(sql, to_params(row)).rowcount]
        if not inserted:
            return [sql]
        head = conn.execute(_GOVERNANCE_HEAD).fetchone()
        log_sql, log_params = self._inserts[schema.governance_log]
        entries = _subject_entries_rows(batch, inserted, None if head is None else tuple(head))
        conn.executemany(log_sql, map(log_params, entries))
        return [sql, _GOVERNANCE_HEAD, log_sql]

    async def close(self) -> None:
        def close_in_thread() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close_in_thread)
        self._executor.shutdown(wait=False)
        await asyncio.wrap_future(self.checkpointer.close())


_GOVERNANCE_HEAD = "SELECT position, hash FROM governance_log ORDER BY position DESC LIMIT 1"


def _upsert_clause(table: Table, *, changed: bool) -> str:
    """The ``ON CONFLICT`` clause that writes a mutable record's row as ``write_projection``
    does when its key is taken: a row of another run is refused (its ``run_id`` set to NULL
    fails the NOT NULL constraint: ``NeedsGeneralPath``, and the general path names the
    conflict); the row is replaced by the new one when its content differs or ``changed`` (the
    batch changed the record: its last content is the row whatever was stored before)."""
    key = mutable_key_column(table)
    t = f'"{table.name}"'
    sets = [
        f'"run_id" = CASE WHEN {t}."run_id" = excluded."run_id" THEN excluded."run_id" END',
        *(
            f'"{c.name}" = excluded."{c.name}"'
            for c in table.columns
            if c.name not in (key, "run_id")
        ),
    ]
    clause = f' ON CONFLICT ("{key}") DO UPDATE SET {", ".join(sets)}'
    if not changed:
        clause += (
            f' WHERE {t}."run_id" <> excluded."run_id"'
            f' OR {t}."content_hash" <> excluded."content_hash"'
        )
    return clause


def _sqlite_insert(
    table: Table, on_conflict: str = ""
) -> tuple[str, Callable[[dict[str, Any]], list[Any]]]:
    """The INSERT of ``table`` (with ``on_conflict``) and the function turning a row into its
    parameters, with the values stored as SQLAlchemy stores them (its SQLite date-time text,
    for one)."""
    dialect = sqlite_dialect.dialect()
    names = [column.name for column in table.columns]
    processors = [
        None if isinstance(column.type, JSON) else column.type._cached_bind_processor(dialect)
        for column in table.columns
    ]
    quoted = ", ".join(f'"{name}"' for name in names)
    sql = f'INSERT INTO "{table.name}" ({quoted}) VALUES ({", ".join("?" for _ in names)})'
    sql += on_conflict
    processed = [(i, p) for i, p in enumerate(processors) if p is not None]

    def to_params(row: dict[str, Any]) -> list[Any]:
        values = [row.get(name) for name in names]
        for i, process in processed:
            if values[i] is not None:
                values[i] = process(values[i])
        return values

    return sql, to_params


# PostgreSQL ----------------------------------------------------------------------------------


class PostgresBatchWriter(BatchWriter):
    """Dedicated asyncpg connections (detached from the pool, up to ``POSTGRES_LANES``: one
    per transaction in flight); a batch is one statement on one of them."""

    def __init__(self, db: Database) -> None:
        super().__init__()
        self._db = db
        self._idle: list[Any] = []
        self._opened = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._free: asyncio.Condition | None = None
        #: the statement of each set of tables a batch writes (each prepared once a connection)
        self._statements: dict[tuple[Table, ...], tuple[str, Layout]] = {}

    async def write(self, batch: FastBatch) -> set[str]:
        import asyncpg

        runs = [run_id for run_id, *_ in batch.moves]
        args: list[Any] = [
            runs,
            [m[1] for m in batch.moves],
            [m[2] for m in batch.moves],
            [m[3] for m in batch.moves],
        ]
        rows_of = {schema.runs: batch.new_runs, schema.data_keys: batch.new_keys, **batch.rows}
        tables = tuple(
            table for table in (schema.runs, schema.data_keys, *FAST_TABLES) if rows_of.get(table)
        )
        if tables not in self._statements:
            self._statements[tables] = _postgres_statement(tables)
        sql, layout = self._statements[tables]
        for table, names, changed in layout:
            rows = rows_of[table]
            if changed is not None:  # a mutable table's rows, in two parts (``_upsert_clause``)
                rows = [row for row in rows if row[CHANGED_IN_BATCH] is changed]
            args.extend([row.get(name) for row in rows] for name in names)
        conn = await self._take()
        sent = [sql]
        try:
            if batch.subjects:
                moved = await self._write_with_subjects(conn, sql, args, batch, sent)
            else:
                moved = {row[0] for row in await conn.fetch(sql, *args)}
        except asyncpg.IntegrityConstraintViolationError as exc:
            await self._give_back(conn)
            raise NeedsGeneralPath(str(exc)) from exc
        except (asyncpg.OperatorInterventionError, asyncpg.PostgresConnectionError) as exc:
            # the server is shutting down or the connection is gone: not a failed statement
            await self._give_back(conn, broken=True)
            raise StoreError(f"database error: {exc!r}") from exc
        except asyncpg.PostgresError as exc:  # the statement failed; the connection is fine
            await self._give_back(conn)
            raise StoreError(f"database error: {exc!r}") from exc
        except (asyncpg.InterfaceError, OSError) as exc:
            await self._give_back(conn, broken=True)
            raise StoreError(f"database error: {exc!r}") from exc
        except BaseException:
            # cancelled mid-statement: the connection's state is unknown
            await self._give_back(conn, broken=True)
            raise
        await self._give_back(conn)
        self._notify(sent, bool(moved) or not runs)
        return set(runs) - moved

    async def _write_with_subjects(
        self, conn: Any, sql: str, args: list[Any], batch: FastBatch, sent: list[str]
    ) -> set[str]:
        """The batch's statement and its subjects in one transaction: the run rows first (as
        the general path locks them), then the governance log's lock, the subjects not there
        yet and their entries (``sent``: the statements, for observers). A head moved
        elsewhere writes nothing (every run returned)."""
        runs = {run_id for run_id, *_ in batch.moves}
        try:
            async with conn.transaction():
                moved = {row[0] for row in await conn.fetch(sql, *args)}
                if moved != runs:
                    raise _Stale
                await conn.execute(_PG_GOVERNANCE_LOCK, GOVERNANCE_LOCK)
                sent += [_PG_GOVERNANCE_LOCK, _PG_SUBJECTS]
                names = [c.name for c in schema.run_subjects.columns]
                inserted_keys = {
                    (row[0], row[1])
                    for row in await conn.fetch(
                        _PG_SUBJECTS, *([row[name] for row in batch.subjects] for name in names)
                    )
                }
                inserted = []  # in the batch's order, each key once (as the general path)
                for row in batch.subjects:
                    key = (row["run_id"], row["subject_id"])
                    if key in inserted_keys:
                        inserted_keys.discard(key)
                        inserted.append(row)
                if inserted:
                    head = await conn.fetchrow(_GOVERNANCE_HEAD)
                    entries = _subject_entries_rows(
                        batch, inserted, None if head is None else (head[0], head[1])
                    )
                    sent += [_GOVERNANCE_HEAD, _PG_GOVERNANCE]
                    log_names = [c.name for c in schema.governance_log.columns]
                    await conn.execute(
                        _PG_GOVERNANCE, *([row[name] for row in entries] for name in log_names)
                    )
        except _Stale:
            return set()  # rolled back: every run of the batch is returned
        return moved

    async def _take(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # connections of another event loop are unusable here
            self._idle, self._opened, self._loop = [], 0, loop
            self._free = asyncio.Condition()
        assert self._free is not None
        async with self._free:
            while not self._idle and self._opened >= POSTGRES_LANES:
                await self._free.wait()
            if self._idle:
                return self._idle.pop()
            self._opened += 1
        try:
            pooled = await asyncio.wait_for(
                self._db.engine.raw_connection(), CONNECT_TIMEOUT_SECONDS * 2
            )
        except _UNAVAILABLE as exc:  # a database down or restarting: unavailable, not a bug
            await self._give_back(None, broken=True)
            raise _store_error(exc) from exc
        except BaseException:
            await self._give_back(None, broken=True)
            raise
        driver = pooled.driver_connection
        assert driver is not None  # an open pooled connection has its driver's
        pooled.detach()  # ours for as long as the database is open
        try:
            # the batch statement's plan does not depend on its arrays' contents (unnest
            # cannot be estimated from them): plan it once, not at each of its first five
            # runs and whenever the custom plan looks cheaper (statements 15-20% faster at
            # the median in the recording bench, issue 35 item 7)
            await driver.execute("SET plan_cache_mode = force_generic_plan")
        except _UNAVAILABLE as exc:
            await self._give_back(driver, broken=True)
            raise _store_error(exc) from exc
        except BaseException:
            await self._give_back(driver, broken=True)
            raise
        return driver

    async def _give_back(self, conn: Any, *, broken: bool = False) -> None:
        if self._free is None or self._loop is not asyncio.get_running_loop():
            return
        if broken:
            if conn is not None and not conn.is_closed():
                conn.terminate()
            self._opened -= 1
        elif conn.is_closed():
            self._opened -= 1
        else:
            self._idle.append(conn)
        async with self._free:
            self._free.notify()

    async def close(self) -> None:
        idle, self._idle, self._opened = self._idle, [], 0
        same_loop = self._loop is asyncio.get_running_loop()
        for conn in idle:
            if conn.is_closed():
                continue
            if same_loop:
                await conn.close(timeout=CONNECT_TIMEOUT_SECONDS)
            else:
                conn.terminate()


_PG_ARRAY_TYPES: tuple[tuple[type, str], ...] = (
    (JSON, "text"),  # JSON travels as its text and is cast to the column's type
    (BigInteger, "bigint"),
    (Integer, "integer"),
    (Boolean, "boolean"),
    (DateTime, "timestamptz"),
    (LargeBinary, "bytea"),
    (String, "text"),
)


def _pg_array_type(column: Any) -> str:
    for sa_type, pg_type in _PG_ARRAY_TYPES:
        if isinstance(column.type, sa_type):
            return pg_type
    raise TypeError(f"no array type for {column.table.name}.{column.name}: {column.type!r}")


#: per part of a PostgreSQL batch statement: its table, the columns its arrays are bound in, and
#: for a mutable table which of its rows (changed in the batch or not; None: every row)
Layout = list[tuple[Table, list[str], bool | None]]


def _postgres_statement(tables: Iterable[Table]) -> tuple[str, Layout]:
    """The one statement of a batch and, per part, the columns its arrays are bound in. The
    runs a batch starts (``runs`` rows) count as moved: their rows go in too."""
    parts = [
        "moves AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[])"
        " AS m(run_id, old_sequence, new_sequence, new_hash))",
        "moved AS (UPDATE runs SET head_sequence = moves.new_sequence,"
        " head_hash = moves.new_hash FROM moves WHERE runs.run_id = moves.run_id"
        " AND runs.head_sequence = moves.old_sequence RETURNING runs.run_id)",
    ]
    layout: Layout = []
    n = 4
    written = "SELECT run_id FROM moved"
    for table in tables:
        kinds: list[bool | None] = [False, True] if table in MUTABLE_TABLES else [None]
        for changed in kinds:
            columns = list(table.columns)
            names = [c.name for c in columns]
            arrays = []
            for column in columns:
                n += 1
                arrays.append(f"${n}::{_pg_array_type(column)}[]")
            selected = [
                f'r."{c.name}"::{"jsonb" if _is_jsonb(c) else "json"}'
                if isinstance(c.type, JSON)
                else f'r."{c.name}"'
                for c in columns
            ]
            quoted = ", ".join(f'"{name}"' for name in names)
            name = table.name + ("" if changed is None else f"_{int(changed)}")
            insert = (
                f"w_{name} AS (INSERT INTO {table.name} ({quoted}) SELECT {', '.join(selected)}"
                f" FROM unnest({', '.join(arrays)}) AS r({quoted})"
            )
            if table is schema.runs:  # new runs: written whole, then their rows below
                parts.append(insert + " RETURNING run_id)")
                written += " UNION ALL SELECT run_id FROM w_runs"
            elif table is schema.data_keys:  # the new runs' keys (no run_id column): all
                parts.append(insert + ")")
            else:
                parts.append(
                    insert
                    + f" WHERE r.run_id IN ({written})"
                    + ("" if changed is None else _upsert_clause(table, changed=changed))
                    + (_DO_NOTHING if table in IF_ABSENT_TABLES else "")
                    + ")"
                )
            layout.append((table, names, changed))
    return "WITH " + ",\n".join(parts) + f"\n{written}", layout


def _pg_unnest_insert(table: Table, tail: str = "") -> str:
    """``INSERT INTO table`` of rows bound as one array per column (in the table's order)."""
    columns = list(table.columns)
    quoted = ", ".join(f'"{c.name}"' for c in columns)
    arrays = ", ".join(f"${i + 1}::{_pg_array_type(c)}[]" for i, c in enumerate(columns))
    selected = ", ".join(
        f'r."{c.name}"::{"jsonb" if _is_jsonb(c) else "json"}'
        if isinstance(c.type, JSON)
        else f'r."{c.name}"'
        for c in columns
    )
    return (
        f"INSERT INTO {table.name} ({quoted}) SELECT {selected} FROM unnest({arrays})"
        f" AS r({quoted}){tail}"
    )


class _Stale(Exception):
    """Internal: a head of the batch moved elsewhere (rolls its transaction back)."""


def _is_jsonb(column: Any) -> bool:
    from sqlalchemy.dialects import postgresql

    impl = column.type.dialect_impl(postgresql.dialect())
    return isinstance(impl, postgresql.JSONB)


#: the subjects of a batch not there yet (PostgreSQL), and their governance entries
_PG_SUBJECTS = _pg_unnest_insert(
    schema.run_subjects, " ON CONFLICT DO NOTHING RETURNING run_id, subject_id"
)
_PG_GOVERNANCE = _pg_unnest_insert(schema.governance_log)
_PG_GOVERNANCE_LOCK = "SELECT pg_advisory_xact_lock($1)"
