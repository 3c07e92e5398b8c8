"""Moving run heads with one compare-and-set statement for a whole batch of runs.

PostgreSQL: ``UPDATE runs … FROM (VALUES …)`` (one statement, every head); SQLite: the same
``UPDATE`` executed for every run in one driver call (``executemany``). Either way the rows
changed must be the runs moved: a head that moved meanwhile is a sequence conflict and the
transaction is rolled back by the caller.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, String, bindparam, column, update, values
from sqlalchemy.ext.asyncio import AsyncConnection

from models.errors import SequenceConflictError
from stores.sql import schema

__all__ = ["move_heads"]


async def move_heads(
    conn: AsyncConnection,
    run_ids: list[str],
    start: dict[str, tuple[int, str]],
    heads: dict[str, tuple[int, str]],
) -> None:
    """Move each run's head from ``start`` to ``heads`` (runs whose head did not move are
    left alone)."""
    moves = [
        (run_id, start[run_id][0], heads[run_id][0], heads[run_id][1])
        for run_id in run_ids
        if heads[run_id][0] != start[run_id][0]
    ]
    if not moves:
        return
    runs = schema.runs
    if conn.dialect.name == "postgresql" and len(moves) > 1:
        moved_rows = values(
            column("run_id", String),
            column("old", BigInteger),
            column("new", BigInteger),
            column("new_hash", String),
            name="moves",
        ).data(moves)
        result = await conn.execute(
            update(runs)
            .where(runs.c.run_id == moved_rows.c.run_id, runs.c.head_sequence == moved_rows.c.old)
            .values(head_sequence=moved_rows.c.new, head_hash=moved_rows.c.new_hash)
        )
        moved = result.rowcount
    else:
        statement = (
            update(runs)
            .where(runs.c.run_id == bindparam("b_run"), runs.c.head_sequence == bindparam("b_old"))
            .values(head_sequence=bindparam("b_new"), head_hash=bindparam("b_hash"))
        )
        params = [{"b_run": r, "b_old": o, "b_new": n, "b_hash": h} for r, o, n, h in moves]
        result = await conn.execute(statement, params)
        moved = result.rowcount
    if moved != len(moves):
        stale = ", ".join(repr(m[0]) for m in moves)
        raise SequenceConflictError(f"runs {stale}: a chain head moved during append")
