"""The SQLite batch writer's WAL is checkpointed beside its commits, not inside one of them
(``stores.sql.wal_checkpoint``): its own connection never checkpoints, a background one does
every ``CHECKPOINT_EVERY_COMMITS`` commits, and what it copies reaches the database file."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path

from models import ExecutionEventType, RunRecord
from stores.artifacts import LocalArtifactStore
from stores.sql.batch_writer import SqliteBatchWriter, batch_writer
from stores.sql.database import open_database
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.wal_checkpoint import CHECKPOINT_EVERY_COMMITS

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def events_in_the_database_file(path: Path) -> int:
    """Events in the main database file alone: ``immutable`` reads it without the WAL."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM execution_events").fetchone()[0])
    finally:
        conn.close()


async def test_the_batch_writer_checkpoints_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "rb.db"
    db = await open_database(f"sqlite+aiosqlite:///{path}")
    try:
        ledger = SqlLedger(db, LocalArtifactStore(tmp_path / "artifacts"))
        run_id = f"ckpt-{uuid.uuid4().hex[:8]}"
        await ledger.create_run(
            RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
        )
        writer = batch_writer(db)
        assert isinstance(writer, SqliteBatchWriter)
        checkpointer = writer.checkpointer
        commits = 2 * CHECKPOINT_EVERY_COMMITS + 1
        for i in range(commits):  # one awaited append: one commit of the batch writer each
            event = NewEvent(
                f"s-{i}", ExecutionEventType.MODEL_CALL, T0, payload={"i": i, "text": "x" * 2000}
            )
            committed = await ledger.submit(run_id, [event])
            await committed
        await asyncio.wrap_future(checkpointer.idle())
        # its own connection never checkpoints: the commits above did not
        own = writer._connection()
        assert own.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert 1 <= checkpointer.checkpoints <= 2
        # what the checkpoints copied is in the database file itself, not only in the WAL
        assert events_in_the_database_file(path) >= CHECKPOINT_EVERY_COMMITS
    finally:
        await db.dispose()
    # disposing closed the checkpointer's connection: the last close checkpointed the rest
    assert events_in_the_database_file(path) == commits
