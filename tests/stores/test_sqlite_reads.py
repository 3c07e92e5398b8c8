"""SQLite reads take no lock: a read transaction left open (a slow reader, a task canceled in
the middle of its read) blocks neither writers nor other reads of the same process."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from sqlalchemy import text

from stores.sql.database import open_database


async def test_an_open_read_blocks_no_writer_and_no_other_read(tmp_path: Path) -> None:
    db = await open_database(f"sqlite+aiosqlite:///{tmp_path / 'reads.db'}", migrate=False)
    try:
        async with db.transaction() as conn:
            await conn.execute(text("CREATE TABLE t (v INTEGER)"))
        async with db.read() as reading:
            # the read transaction is open (its snapshot taken) for the whole block
            assert (await reading.execute(text("SELECT count(*) FROM t"))).scalar() == 0
            # BEGIN IMMEDIATE on reads made this writer wait out the busy timeout (10 s)
            async with asyncio.timeout(5):
                async with db.transaction() as conn:
                    await conn.execute(text("INSERT INTO t VALUES (1)"))
                async with db.read() as other:
                    assert (await other.execute(text("SELECT count(*) FROM t"))).scalar() == 1
            # the open read still sees its snapshot
            assert (await reading.execute(text("SELECT count(*) FROM t"))).scalar() == 0
    finally:
        await db.dispose()


async def test_opening_a_current_database_takes_no_write_lock(tmp_path: Path) -> None:
    """A process opening a database whose schema is current never waits for the write lock:
    with another process writing busily, it used to fail after the busy timeout."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'open.db'}"
    await (await open_database(url)).dispose()  # migrated to the newest schema
    holder = sqlite3.connect(tmp_path / "open.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another process's write transaction, held
        async with asyncio.timeout(5):  # less than the busy timeout (10 s) it waited out
            db = await open_database(url)
        try:
            async with db.read() as conn:
                version = await conn.execute(text("SELECT version_num FROM alembic_version"))
                assert version.scalar()
        finally:
            await db.dispose()
    finally:
        holder.rollback()
        holder.close()


async def test_a_database_behind_the_code_is_still_migrated(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    await (await open_database(url)).dispose()
    with sqlite3.connect(tmp_path / "old.db") as raw:
        raw.execute("UPDATE alembic_version SET version_num = '0007'")
        raw.execute("DROP INDEX ix_runs_created")
    db = await open_database(url)
    try:
        async with db.read() as conn:
            version = await conn.execute(text("SELECT version_num FROM alembic_version"))
            assert version.scalar() == "0008"
            index = "SELECT count(*) FROM sqlite_master WHERE name = 'ix_runs_created'"
            assert (await conn.execute(text(index))).scalar() == 1
    finally:
        await db.dispose()
