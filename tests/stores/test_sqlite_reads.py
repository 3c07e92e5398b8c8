"""SQLite reads take no lock: a read transaction left open (a slow reader, a task canceled in
the middle of its read) blocks neither writers nor other reads of the same process."""

from __future__ import annotations

import asyncio
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
