"""Verification of an intact chain straight from the stored columns, through the raw driver.

The database writes each event's chained text itself, from the fixed template of its canonical
metadata (``models.chain.TEMPLATE_LITERALS`` around ``TEMPLATE_FIELDS``): ``previous_hash ‖
metadata ‖ payload_hash`` as one text per row, the instants in ``format_instant`` form. The rows
come from the driver's own cursor (no SQLAlchemy row or type processing, no object per event),
and Python checks order, links, escapes and hashes over whole columns
(``models.chain.verify_chain_columns``). Anything that does not verify answers None: the caller
then takes the general path, which names what is broken and where.

The same read gives ``run_check`` the events it needs for a full verification
(``StoredEvent``), so an intact run is read once.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncConnection

from models.chain import (
    TEMPLATE_FIELDS,
    TEMPLATE_LITERALS,
    ChainColumns,
    ChainVerification,
    verify_chain_columns,
)

__all__ = ["StoredEvent", "fetch_run_rows", "read_intact_chain", "verify_intact_chain"]


class StoredEvent(NamedTuple):
    """What the checks beyond the chain (``stores.sql.run_check``) read of a chained event."""

    sequence: int
    event_id: str
    type: str
    payload_ref: str
    payload_hash: str
    hash: str
    #: the inline payload; None when it is held in the artifact store
    payload: bytes | None


#: what the text holds in place of a value that is NULL or not in the stored form: a backslash,
#: which the template never writes (so the text fails ``verify_chain_columns``' check). printf
#: and format write NULL as nothing, and a hash forged over that must not verify here.
_MISSING = "'\\'"


def _instant_sql(column: str, sqlite: bool) -> str:
    """SQL for ``format_instant`` of a stored instant (``2026-11-03T09:00:00.001000Z``)."""
    if sqlite:  # SQLAlchemy stores "2026-11-03 09:00:00.001000"
        return (
            f"CASE WHEN length({column}) = 26 THEN replace({column}, ' ', 'T') || 'Z'"
            f" ELSE {_MISSING} END"
        )
    return f"""to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""


def _field_sql(name: str, sqlite: bool) -> str:
    if name in ("logical_time", "recorded_at"):
        return f"coalesce({_instant_sql(name, sqlite)}, {_MISSING})"
    if name in ("schema_version", "sequence"):
        return f"coalesce(CAST({name} AS TEXT), {_MISSING})"
    return f"coalesce({name}, {_MISSING})"


@functools.cache
def _query(sqlite: bool, with_events: bool) -> str:
    """The rows verification reads, each with its chained text written by one call of the
    database's printf (SQLite) or format (PostgreSQL) from the template."""
    template = "%s" + "%s".join(TEMPLATE_LITERALS) + "%s"
    fields = [_field_sql(name, sqlite) for name in ("previous_hash", *TEMPLATE_FIELDS)]
    arguments = ", ".join([*fields, _field_sql("payload_hash", sqlite)])
    text = f"{'printf' if sqlite else 'format'}('{template.replace(chr(39), chr(39) * 2)}', {arguments})"
    return (
        f"SELECT sequence, previous_hash, {text}, payload_hash, hash, payload"
        f"{', event_id, type, payload_ref' if with_events else ''}"
        f" FROM execution_events WHERE run_id = {'?' if sqlite else '$1'} ORDER BY sequence"
    )


async def _fetch(conn: AsyncConnection, sql: str, run_id: str) -> list[Any]:
    """All rows of ``sql`` from the driver's own connection (aiosqlite or asyncpg)."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    if conn.dialect.name == "sqlite":
        return list(await driver.execute_fetchall(sql, (run_id,)))
    return list(await driver.fetch(sql, run_id))


async def fetch_run_rows(conn: AsyncConnection, table: str, run_id: str) -> list[dict[str, Any]]:
    """Every row of ``table`` (a name from the schema, never input) for ``run_id``, as column
    name to the driver's value, read through the driver's own cursor."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    if conn.dialect.name == "sqlite":
        cursor = await driver.execute(f"SELECT * FROM {table} WHERE run_id = ?", (run_id,))
        try:
            rows = await cursor.fetchall()
            names = [d[0] for d in cursor.description]
        finally:
            await cursor.close()
        return [dict(zip(names, row, strict=True)) for row in rows]
    return [
        dict(record.items())
        for record in await driver.fetch(f"SELECT * FROM {table} WHERE run_id = $1", run_id)
    ]


async def read_intact_chain(
    conn: AsyncConnection, run_id: str, *, with_events: bool = True
) -> tuple[ChainVerification, list[StoredEvent]] | None:
    """The run's chain verification and (``with_events``) its events, if its chain and header
    head are intact; else None."""
    sqlite = conn.dialect.name == "sqlite"
    head_sql = "SELECT head_sequence, head_hash FROM runs WHERE run_id = " + (
        "?" if sqlite else "$1"
    )
    heads = await _fetch(conn, head_sql, run_id)
    if not heads:
        return None
    rows = await _fetch(conn, _query(sqlite, with_events), run_id)
    width = 9 if with_events else 6
    columns: Sequence[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * width
    sequences, previous, texts, payload_hashes, hashes, payloads = columns[:6]
    chain = verify_chain_columns(
        run_id,
        ChainColumns(sequences, previous, texts, payload_hashes, hashes, payloads),
        expected_head=(heads[0][0], heads[0][1]),
    )
    if chain is None or not with_events:
        return None if chain is None else (chain, [])
    event_ids, types, refs = columns[6:]
    events = list(
        map(
            StoredEvent._make,
            zip(sequences, event_ids, types, refs, payload_hashes, hashes, payloads, strict=True),
        )
    )
    return chain, events


async def verify_intact_chain(conn: AsyncConnection, run_id: str) -> ChainVerification | None:
    """The run's chain verification if its chain and header head are intact, else None."""
    intact = await read_intact_chain(conn, run_id, with_events=False)
    return None if intact is None else intact[0]
