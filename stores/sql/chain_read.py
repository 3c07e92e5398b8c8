"""Verification of an intact chain straight from the stored columns, through the raw driver.

The database writes each event's chained text itself, from the fixed template of its canonical
metadata (``models.chain.TEMPLATE_LITERALS`` around ``TEMPLATE_FIELDS``): ``previous_hash ‖
metadata ‖ payload_hash`` as one text per event, the instants in ``format_instant`` form. The
rows come from the driver's own cursor (no SQLAlchemy row or type processing).

The chain-only check (``verify_intact_chain``) reads each chunk of ``CHUNK_EVENTS`` events as
one row of joined texts (``string_agg`` / ``group_concat``; ``models.chain_joined``), the next
chunk's read under way while this one is hashed: no object per event, every check but the
hashing one comparison per chunk. The full check (``read_intact_chain`` with events) reads one
row per event, which its checks beyond the chain (``run_check``) need as ``StoredEvent``s, and
checks order, links, escapes and hashes over whole columns
(``models.chain.verify_chain_columns``); an intact run is read once. Anything that does not
verify answers None: the caller then takes the general path, which names what is broken and
where.
"""

from __future__ import annotations

import asyncio
import functools
import json
import typing
from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from models.chain import (
    TEMPLATE_FIELDS,
    TEMPLATE_LITERALS,
    ChainColumns,
    ChainVerification,
    verify_chain_columns,
)
from models.chain_joined import ChainChunk, JoinedChainCheck

__all__ = [
    "StoredEvent",
    "fetch_lookup_rows",
    "fetch_run_rows",
    "read_intact_chain",
    "verify_intact_chain",
]


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


def _text_sql(sqlite: bool) -> str:
    """SQL for an event's chained text, written by one call of the database's printf
    (SQLite) or format (PostgreSQL) from the template."""
    template = "%s" + "%s".join(TEMPLATE_LITERALS) + "%s"
    fields = [_field_sql(name, sqlite) for name in ("previous_hash", *TEMPLATE_FIELDS)]
    arguments = ", ".join([*fields, _field_sql("payload_hash", sqlite)])
    return f"{'printf' if sqlite else 'format'}('{template.replace(chr(39), chr(39) * 2)}', {arguments})"


@functools.cache
def _query(sqlite: bool, with_events: bool) -> str:
    """The rows verification reads, each with its chained text."""
    return (
        f"SELECT sequence, previous_hash, {_text_sql(sqlite)}, payload_hash, hash, payload"
        f"{', event_id, type, payload_ref' if with_events else ''}"
        f" FROM execution_events WHERE run_id = {'?' if sqlite else '$1'} ORDER BY sequence"
    )


async def _fetch(conn: AsyncConnection, sql: str, arguments: tuple[Any, ...]) -> list[Any]:
    """All rows of ``sql`` from the driver's own connection (aiosqlite or asyncpg)."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    if conn.dialect.name == "sqlite":
        return list(await driver.execute_fetchall(sql, arguments))
    return list(await driver.fetch(sql, *arguments))


async def fetch_run_rows(conn: AsyncConnection, table: str, run_id: str) -> list[dict[str, Any]]:
    """Every row of ``table`` (a name from the schema, never input) for ``run_id``, as column
    name to value, read through the driver's own cursor: SQLite's values as the driver gives
    them (a JSON column as its text), PostgreSQL's as the row's JSON (``row_to_json``: a JSON
    column as its parsed value, an instant as its ISO text), parsed natively."""
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
    # one text per row: no per-column decoding by the driver (asyncpg reads JSON columns with
    # the stdlib parser)
    texts = await driver.fetch(
        f"SELECT row_to_json(t)::text FROM {table} AS t WHERE t.run_id = $1", run_id
    )
    return [_json_row(text) for (text,) in texts]


async def fetch_lookup_rows(
    conn: AsyncConnection, tables: Sequence[str], run_id: str
) -> dict[str, list[dict[str, Any]]]:
    """``fetch_run_rows`` of each of ``tables`` (names from the schema, never input); from
    PostgreSQL in one statement (one round trip, the server's work under way while the caller
    does its own)."""
    if conn.dialect.name == "sqlite":
        return {table: await fetch_run_rows(conn, table, run_id) for table in tables}
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    sql = " UNION ALL ".join(
        f"SELECT {index}, row_to_json(t)::text FROM {table} AS t WHERE t.run_id = $1"
        for index, table in enumerate(tables)
    )
    out: dict[str, list[dict[str, Any]]] = {table: [] for table in tables}
    for index, text in await driver.fetch(sql, run_id):
        out[tables[index]].append(_json_row(text))
    return out


def _json_row(text: str) -> dict[str, Any]:
    """A row's JSON: natively for what orjson reads, the rest (integers beyond 64 bits) as
    ``json`` reads it."""
    try:
        row = orjson.loads(text)
    except orjson.JSONDecodeError:
        row = json.loads(text)
    return typing.cast(dict[str, Any], row)


#: events per joined read: bounds the texts held at once (~0.5 KB an event); the next chunk is
#: read while this one is hashed
CHUNK_EVENTS = 2048


@functools.cache
def _joined_query(sqlite: bool) -> str:
    """One chunk of a run's events (``lower < sequence <= upper``) as joined texts, in
    ascending ``sequence`` order (``models.chain_joined.ChainChunk``), and how many of its
    rows have the stored types (SQLite keeps any type in any column). PostgreSQL adds the
    inline payloads as an array; SQLite reads them as rows (``_PAYLOADS``)."""
    if sqlite:
        typed = (
            "sum(typeof(sequence) = 'integer' AND typeof(previous_hash) = 'text'"
            " AND typeof(hash) = 'text' AND typeof(payload_hash) = 'text'"
            " AND (payload IS NULL OR typeof(payload) = 'blob'))"
        )
        join, text_separator, payloads = "group_concat", "char(10)", ""
    else:
        typed = "count(*)"
        join, text_separator = "string_agg", "E'\\n'"
        payloads = ", array_agg(payload) FILTER (WHERE payload IS NOT NULL)"
    # the aggregates read the rows in the order of the subquery; the joined sequences show
    # it (any other order does not verify)
    return (
        f"SELECT count(*), {typed}, {join}({'sequence' if sqlite else 'CAST(sequence AS TEXT)'},"
        f" ','), {join}(previous_hash, ','), {join}(hash, ','), {join}(text, {text_separator}),"
        f" {join}(CASE WHEN payload IS NOT NULL THEN payload_hash END, ','){payloads}"
        " FROM (SELECT sequence, previous_hash, hash, payload_hash, payload,"
        f" {_text_sql(sqlite)} AS text FROM execution_events {_RANGE[sqlite]} ORDER BY sequence)"
        " AS events"
    )


_RANGE = {
    True: "WHERE run_id = ? AND sequence > ? AND sequence <= ?",
    False: "WHERE run_id = $1 AND sequence > $2 AND sequence <= $3",
}
_PAYLOADS = f"SELECT payload FROM execution_events {_RANGE[True]} AND payload IS NOT NULL" + (
    " ORDER BY sequence"
)


async def _read_chunk(
    conn: AsyncConnection, sqlite: bool, arguments: tuple[str, int, int]
) -> ChainChunk | None:
    if sqlite:  # both reads queued on aiosqlite's thread (the payloads one loop turn later)
        payload_read = asyncio.ensure_future(_fetch(conn, _PAYLOADS, arguments))
        try:
            rows = await _fetch(conn, _joined_query(sqlite), arguments)
        finally:
            payload_rows = await payload_read
    else:
        rows = await _fetch(conn, _joined_query(sqlite), arguments)
    count, typed, sequences, previous, hashes, texts, inline_hashes, *rest = rows[0]
    payloads = [row[0] for row in payload_rows] if sqlite else rest[0] or []
    if count and typed != count:
        return None
    return ChainChunk(count, sequences, previous, hashes, texts, payloads, inline_hashes)


async def _verify_joined(conn: AsyncConnection, run_id: str) -> ChainVerification | None:
    """``verify_intact_chain`` from joined texts, one read per ``CHUNK_EVENTS`` events, the
    next one under way while this one is checked."""
    sqlite = conn.dialect.name == "sqlite"
    heads = await _fetch(
        conn,
        "SELECT head_sequence, head_hash, (SELECT count(*) FROM execution_events"
        f" WHERE run_id = runs.run_id) FROM runs WHERE run_id = {'?' if sqlite else '$1'}",
        (run_id,),
    )
    if not heads:
        return None
    head_sequence, head_hash, total = heads[0]
    # every row of the run is in one of the ranges read: any other row (a sequence out of
    # range or of another type) is counted in ``total`` but in no chunk
    if total != head_sequence or type(total) is not int:
        return None
    check = JoinedChainCheck()
    lowers = range(0, max(total, 1), CHUNK_EVENTS)
    pending = asyncio.ensure_future(_read_chunk(conn, sqlite, (run_id, 0, CHUNK_EVENTS)))
    for lower in lowers:
        chunk = await pending
        upper = lower + 2 * CHUNK_EVENTS
        if lower + CHUNK_EVENTS < lowers.stop:
            pending = asyncio.ensure_future(
                _read_chunk(conn, sqlite, (run_id, lower + CHUNK_EVENTS, upper))
            )
            # the reads are sent before this chunk is hashed (a loop turn for each)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        if chunk is None or not check.add(chunk):
            # the connection is free again before it is returned (the general path reads next)
            await asyncio.gather(pending, return_exceptions=True)
            return None
    return check.verification(run_id, expected_head=(head_sequence, head_hash))


async def read_intact_chain(
    conn: AsyncConnection, run_id: str, *, with_events: bool = True
) -> tuple[ChainVerification, list[StoredEvent]] | None:
    """The run's chain verification and (``with_events``) its events, if its chain and header
    head are intact; else None."""
    if not with_events:
        chain = await _verify_joined(conn, run_id)
        return None if chain is None else (chain, [])
    sqlite = conn.dialect.name == "sqlite"
    head_sql = "SELECT head_sequence, head_hash FROM runs WHERE run_id = " + (
        "?" if sqlite else "$1"
    )
    heads = await _fetch(conn, head_sql, (run_id,))
    if not heads:
        return None
    rows = await _fetch(conn, _query(sqlite, with_events), (run_id,))
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
    return await _verify_joined(conn, run_id)
