"""Opening a database: URL normalisation, SQLite pragmas, automatic Alembic migrations."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as SATimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from models.errors import ConfigurationError, StoreError

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# an arbitrary constant: serialises concurrent migrators on one PostgreSQL database
_PG_MIGRATION_LOCK = 0x5245504C  # "REPL"
#: how long opening a PostgreSQL connection may take before the store counts as unavailable
CONNECT_TIMEOUT_SECONDS = 10


def normalize_database_url(url: str) -> str:
    """Accept the common spellings and return the async-driver URL SQLAlchemy needs."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigurationError(f"REPLAYBOOK_DATABASE_URL is not a database URL: {url!r}") from exc
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+asyncpg")
    elif backend == "sqlite":
        parsed = parsed.set(drivername="sqlite+aiosqlite")
        if parsed.database in (None, "", ":memory:"):
            raise ConfigurationError(
                "SQLite needs a file path (an in-memory database is not shared)"
            )
    else:
        raise ConfigurationError(
            f"unsupported database {backend!r} in {url!r}: use postgresql:// or sqlite:///PATH"
        )
    return parsed.render_as_string(hide_password=False)


def utc(value: datetime) -> datetime:
    """SQLite returns naive datetimes; everything Replaybook stores is UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: the execution option ``Database.read`` sets on its connections (SQLite: a deferred BEGIN)
READS_ONLY = "replaybook_reads_only"
#: the statement that begins ``Database.snapshot``'s snapshot, by ``is_postgresql``
_SNAPSHOT_START = {True: "SELECT 1", False: "SELECT count(*) FROM sqlite_master"}
#: how long a SQLite write transaction waits for the write lock (``PRAGMA busy_timeout``)
SQLITE_BUSY_SECONDS = 10.0
#: ``synchronous=FULL``: in WAL mode a commit syncs the WAL before it returns, so it survives an
#: operating system crash or a power cut, where NORMAL's survives only the process's death.
#: The evidence stands on commits: a side effect's intent is committed before its provider is
#: called (the write-ahead rule), the API answers an ingested batch or an OTLP export once it
#: is committed, and the SDK deletes its fsync'ed spool on that answer. It costs one WAL sync a
#: commit (0.27-0.38 ms measured on this machine's disk; a group commit pays it once for all).
SQLITE_SYNCHRONOUS = "FULL"


def sqlite_pragmas(*, foreign_keys: bool = True) -> tuple[str, ...]:
    """What every SQLite connection Replaybook opens runs first: the pooled connections
    (``install_sqlite_pragmas``) and those of the batch writer, the OTLP writer and the WAL
    checkpointer, one list so that none of them commits with weaker settings."""
    return (
        "PRAGMA journal_mode=WAL",
        f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}",
        *(("PRAGMA foreign_keys=ON",) if foreign_keys else ()),
        f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}",
    )


@dataclass
class Database:
    engine: AsyncEngine
    #: SQLite admits one writer at a time: this process's write transactions queue for it
    #: here (first come, first served) instead of polling the file lock with the busy
    #: handler's growing sleeps (1, 2, 5 … 100 ms) while another of them holds it. One lock
    #: per event loop; other processes are still waited for by the busy handler.
    _write_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = field(
        default_factory=weakref.WeakKeyDictionary, repr=False, compare=False
    )
    #: connections kept beside the pool (the ledger's batch writer,
    #: ``stores.sql.batch_writer``): each has an async ``close``, called by ``dispose``
    owned: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def is_postgresql(self) -> bool:
        return self.dialect == "postgresql"

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction; driver errors leave as ``StoreError``."""
        async with self._writer():
            try:
                async with self.engine.begin() as conn:
                    yield conn
            except _UNAVAILABLE as exc:
                raise _store_error(exc) from exc

    @contextlib.asynccontextmanager
    async def _writer(self) -> AsyncIterator[None]:
        """SQLite: hold this process's write lock (see ``_write_locks``); else nothing."""
        if self.is_postgresql:
            yield
            return
        loop = asyncio.get_running_loop()
        lock = self._write_locks.get(loop)
        if lock is None:
            lock = self._write_locks[loop] = asyncio.Lock()
        try:
            async with asyncio.timeout(SQLITE_BUSY_SECONDS):
                await lock.acquire()
        except TimeoutError:
            raise StoreError(
                f"database error: the write lock was held by this process for more than "
                f"{SQLITE_BUSY_SECONDS:g} s (database is locked)"
            ) from None
        try:
            yield
        finally:
            lock.release()

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads. On SQLite its transaction is a plain (deferred) BEGIN: a
        snapshot of the WAL that takes no lock a writer or another read would wait for."""
        try:
            async with self.engine.connect() as conn:
                if not self.is_postgresql:
                    await conn.execution_options(**{READS_ONLY: True})
                yield conn
        except _UNAVAILABLE as exc:
            raise _store_error(exc) from exc

    @contextlib.asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """A connection whose every statement (SQLAlchemy's or the raw driver's) reads one
        consistent snapshot, taken on entry: PostgreSQL's REPEATABLE READ, READ ONLY
        transaction; SQLite's read transaction on the WAL. What verification reads a run
        with: its chain, lookup rows and freezes as of one moment, so a run being written
        verifies intact up to the head it read instead of rows newer than its chain."""
        try:
            async with self.engine.connect() as conn:
                if self.is_postgresql:
                    await conn.execution_options(
                        isolation_level="REPEATABLE READ", postgresql_readonly=True
                    )
                else:
                    await conn.execution_options(**{READS_ONLY: True})
                async with conn.begin():
                    # the snapshot begins with the first statement that reads the database
                    # (PostgreSQL: any; SQLite: one that reads the file), not with BEGIN, and
                    # the raw driver's statements would not begin the transaction at all
                    await conn.execute(text(_SNAPSHOT_START[self.is_postgresql]))
                    yield conn
        except _UNAVAILABLE as exc:
            raise _store_error(exc) from exc

    async def dispose(self) -> None:
        owned = list(self.owned.values())
        self.owned.clear()
        for resource in owned:
            await resource.close()
        await self.engine.dispose()


def _driver_unavailable() -> tuple[type[BaseException], ...]:
    """asyncpg's own errors of a server that is going away or not taking connections: they
    reach us unwrapped from a connect (SQLAlchemy wraps only the DB-API's classes) and from the
    raw driver (``chain_read``, the batch writer): "the database system is shutting down" or
    "is starting up" (57P03), an administrator's or a crash shutdown (57P01, 57P02), a lost
    connection (class 08), too many connections (class 53)."""
    try:
        from asyncpg import exceptions
    except ImportError:  # an installation without PostgreSQL
        return ()
    return (
        exceptions.OperatorInterventionError,
        exceptions.PostgresConnectionError,
        exceptions.InsufficientResourcesError,
        *_adapter_errors(),
    )


def _adapter_errors() -> tuple[type[BaseException], ...]:
    """SQLAlchemy 2.1's asyncio adapters raise their own DB-API classes, unwrapped, from a
    connect outside a statement (``engine.raw_connection()``, the batch writer's lanes): a
    "database system is shutting down" there is ``AsyncAdapt_asyncpg_dbapi.Error``, not a
    ``DBAPIError`` (seen in the PostgreSQL outage test)."""
    try:
        from sqlalchemy.connectors.asyncio import AsyncAdapt_Error
    except ImportError:  # SQLAlchemy 2.0 wraps them in DBAPIError
        return ()
    return (AsyncAdapt_Error,)


#: what a database that is down, restarting, shutting down or out of connections raises: a
#: driver error, a refused or reset connection (asyncpg raises plain ``OSError``s), a pool or
#: connect timeout
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    DBAPIError,
    OSError,
    TimeoutError,
    SATimeoutError,
    *_driver_unavailable(),
)
#: the same, for the faces' last resort (a store error that escaped the stores' mapping is 503)
UNAVAILABLE_ERRORS = _UNAVAILABLE


def _store_error(exc: BaseException) -> StoreError:
    detail = exc.orig if isinstance(exc, DBAPIError) else exc
    return StoreError(f"database error: {detail!r}")


def install_sqlite_pragmas(engine: AsyncEngine, *, foreign_keys: bool = True) -> None:
    """WAL, a busy timeout and ``BEGIN IMMEDIATE`` on every connection of a SQLite engine."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # the driver's own implicit BEGIN is turned off so that we can say BEGIN IMMEDIATE
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in sqlite_pragmas(foreign_keys=foreign_keys):
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READS_ONLY):
            # ``Database.read``: a read snapshot. BEGIN IMMEDIATE here made every read take
            # the write lock, so reads of one request on several connections (the full run
            # check) queued on the busy handler, and one whose task was canceled could keep
            # the lock until the busy timeout failed every writer ("database is locked")
            conn.exec_driver_sql("BEGIN")
            return
        # IMMEDIATE takes the write lock up front: two writers can never both read the
        # same chain head and then deadlock (or fork) when upgrading to a write lock
        conn.exec_driver_sql("BEGIN IMMEDIATE")


async def open_database(url: str, *, migrate: bool = True, echo: bool = False) -> Database:
    """Open the database at ``url`` and bring its schema to the newest migration."""
    url = normalize_database_url(url)
    kwargs: dict[str, object] = {"echo": echo}
    if url.startswith("sqlite"):
        path = make_url(url).database
        assert path is not None
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    else:
        kwargs["pool_pre_ping"] = True
        if "+asyncpg" in url:  # a database that does not answer fails in seconds, not a minute
            kwargs["connect_args"] = {"timeout": CONNECT_TIMEOUT_SECONDS}
    engine = create_async_engine(url, **kwargs)
    if url.startswith("sqlite"):
        install_sqlite_pragmas(engine)
    db = Database(engine)
    if migrate:
        try:
            await upgrade_schema(db)
        except (SQLAlchemyError, OSError) as exc:
            await engine.dispose()
            raise StoreError(f"cannot open database {make_url(url)!r}: {exc}") from exc
    return db


async def upgrade_schema(db: Database) -> None:
    """Apply every pending Alembic migration (idempotent; safe with concurrent callers).

    A schema already at the newest migration is seen in a read snapshot first and left
    alone: opening a database then takes no write lock. On SQLite a process that opened it
    while others wrote busily used to wait on the busy handler for the write lock, whose
    polling loses to writers that hand it from one to the next, and failed after
    ``SQLITE_BUSY_SECONDS`` ("database is locked", seen with 60 replays writing)."""
    async with db.read() as conn:
        if await conn.run_sync(_at_newest_migration):
            return
    async with db.engine.begin() as conn:
        if db.is_postgresql:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        await conn.run_sync(_upgrade_sync)


@functools.cache
def _newest_migrations() -> frozenset[str]:
    """The head revisions of the migrations shipped with this code."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return frozenset(ScriptDirectory.from_config(config).get_heads())


def _at_newest_migration(connection: Connection) -> bool:
    """Whether the database's schema is at the newest migration (no table yet: False)."""
    from alembic.runtime.migration import MigrationContext

    current = MigrationContext.configure(connection).get_current_heads()
    return frozenset(current) == _newest_migrations()


def _upgrade_sync(connection: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
