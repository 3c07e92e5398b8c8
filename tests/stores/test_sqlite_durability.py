"""Every SQLite connection that commits evidence syncs the WAL at each commit
(``synchronous=FULL``, ``stores.sql.database.SQLITE_SYNCHRONOUS``): a commit is what the
write-ahead rule, the API's answers and the SDK's deleted spool stand on, so it must survive an
operating system crash or a power cut, not only the process's death (``NORMAL``'s promise in WAL
mode). The pooled connections, the batch writer's, the OTLP writer's and the WAL checkpointer's
are made in different places; each is asked here."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text

from models import ExecutionEventType
from stores.artifacts import LocalArtifactStore
from stores.sql.batch_writer import SqliteBatchWriter, batch_writer
from stores.sql.database import open_database, sqlite_pragmas
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.otlp_writer import sqlite_export_writer
from stores.sql.wal_checkpoint import CHECKPOINT_EVERY_COMMITS
from tests.stores.test_write_behind import new_run

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
FULL = 2  # what ``PRAGMA synchronous`` reads back for FULL (NORMAL is 1)


def synchronous(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA synchronous").fetchone()[0])


def test_the_shared_pragmas_ask_for_full_syncs_in_wal_mode() -> None:
    pragmas = sqlite_pragmas()
    assert "PRAGMA journal_mode=WAL" in pragmas
    assert "PRAGMA synchronous=FULL" in pragmas
    assert "PRAGMA synchronous=FULL" in sqlite_pragmas(foreign_keys=False)


async def test_every_connection_that_commits_evidence_syncs_each_commit(tmp_path: Path) -> None:
    path = tmp_path / "rb.db"
    db = await open_database(f"sqlite+aiosqlite:///{path}")
    try:
        async with db.engine.connect() as conn:  # a pooled connection
            value = (await conn.execute(text("PRAGMA synchronous"))).scalar_one()
            assert value == FULL
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            assert mode == "wal"

        # the batch writer's connection, after it committed events (the recorder's path)
        ledger = SqlLedger(db, LocalArtifactStore(tmp_path / "artifacts"))
        run_id = await new_run(ledger)
        writer = batch_writer(db)
        assert isinstance(writer, SqliteBatchWriter)
        for i in range(CHECKPOINT_EVERY_COMMITS):  # enough commits for one checkpoint
            event = NewEvent(f"s-{i}", ExecutionEventType.MODEL_CALL, T0, payload={"i": i})
            await (await ledger.submit(run_id, [event]))
        assert synchronous(writer._connection()) == FULL

        # the WAL checkpointer's own connection, made by the checkpoint those commits started
        await asyncio.wrap_future(writer.checkpointer.idle())
        assert writer.checkpointer.checkpoints == 1
        checkpoint_conn = writer.checkpointer._conn
        assert checkpoint_conn is not None
        # asked on the checkpointer's own thread, where its connection lives
        asked = writer.checkpointer._executor.submit(synchronous, checkpoint_conn)
        assert await asyncio.wrap_future(asked) == FULL

        # the OTLP export writer's connection (the API answers an export once it is committed)
        assert synchronous(sqlite_export_writer(db)._connection()) == FULL
    finally:
        await db.dispose()
