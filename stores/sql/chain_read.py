"""Verification of an intact chain straight from the stored columns, through the raw driver.

The rows come from the driver's own cursor (no SQLAlchemy row or type processing), and every
event's hash is recomputed from its stored fields written into the fixed template of its
canonical metadata (``models.chain.TEMPLATE_LITERALS`` around ``TEMPLATE_FIELDS``):
``previous_hash ‖ metadata ‖ payload_hash``, the instants in ``format_instant`` form.

Both the chain-only check and the full check's chain (``verify_intact_chain``) read each chunk
of events as one row of joined columns (``string_agg`` / ``group_concat``: the stored values
only) and ``models.chain_joined`` writes the chained texts from them, one join per event, the
next chunks' reads under way while one is hashed: no object per event but the texts, every
check but the hashing one comparison per chunk and column. What the full check's checks beyond
the chain (``run_check``) read of the events (ids, types, payload refs and hashes, hashes,
inline payloads) is split from the same verified columns and handed over chunk by chunk (its
work on them overlaps the next read): an intact run is read once.
Anything that does not verify answers None: the caller then takes the general path, which
names what is broken and where.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncConnection

from models.chain import ChainVerification, header_genesis
from models.chain_joined import (
    CHUNK_FIELDS,
    FIELD_SEPARATOR,
    INSTANT_FIELDS,
    ChainChunk,
    JoinedChainCheck,
    split_payloads,
)
from models.verification import ChainedEvents

__all__ = [
    "fetch_lookup_rows",
    "json_value",
    "json_values",
    "verify_intact_chain",
]


#: what a joined column holds in place of a value that is NULL: a backslash, which the template
#: never writes (so the chunk does not verify). A join leaves a NULL out, and another value
#: holding the separator would make up for it.
_MISSING = "'\\'"


async def _fetch(conn: AsyncConnection, sql: str, arguments: tuple[Any, ...]) -> list[Any]:
    """All rows of ``sql`` from the driver's own connection (aiosqlite or asyncpg)."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    if conn.dialect.name == "sqlite":
        return list(await driver.execute_fetchall(sql, arguments))
    return list(await driver.fetch(sql, *arguments))


async def fetch_lookup_rows(
    conn: AsyncConnection, tables: Mapping[str, Sequence[str]], run_id: str
) -> dict[str, list[Sequence[Any]]]:
    """The rows of each of ``tables`` (names and columns from the schema, never input) for
    ``run_id`` as columns: for each of the given columns its rows' values (in one order), the
    last column's (JSON) parsed, a text that is not JSON left as it is. Read through the
    driver's own cursor in one statement (one round trip: the caller's loop, busy hashing the
    chain, takes each result in turn): SQLite's other values as it gives them; PostgreSQL's as
    JSON (an instant as its ISO text), each table's rows as one JSON array parsed natively
    (asyncpg would read a JSON column with the stdlib parser)."""
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    out: dict[str, list[Sequence[Any]]] = {}
    names = list(tables)
    if conn.dialect.name == "sqlite":
        try:
            return await _sqlite_lookup_rows(driver, tables, run_id)
        except (sqlite3.Error, _NotJson):
            # a BLOB where JSON cannot hold it, a value of the JSON column that is not JSON
            # (its stored type then kept): the rows one by one
            return await _sqlite_lookup_rows(driver, tables, run_id, aggregated=False)
    sql = " UNION ALL ".join(
        f"SELECT {index}, json_agg(json_build_array({', '.join(tables[table])}))::text"
        f" FROM {table} WHERE run_id = $1"
        for index, table in enumerate(names)
    )
    for index, text in await driver.fetch(sql, run_id):
        # a table without rows aggregates to NULL
        rows = [] if text is None else json_value(text)
        out[names[index]] = _columns(rows, len(tables[names[index]]))
    return out


async def _sqlite_lookup_rows(
    driver: Any, tables: Mapping[str, Sequence[str]], run_id: str, *, aggregated: bool = True
) -> dict[str, list[Sequence[Any]]]:
    """``fetch_lookup_rows`` from SQLite: ``aggregated``, one row a table (aiosqlite's thread
    takes the GIL for each row of a result, which it waits for while the caller hashes the
    chain): the other columns' values as a JSON array of arrays (the stored types kept), the
    JSON column's values as one blob and their lengths (-1 for a NULL); else the rows, padded
    with NULLs to the widest table."""
    names = list(tables)
    out: dict[str, list[Sequence[Any]]] = {}
    if aggregated:
        sql = " UNION ALL ".join(
            f"SELECT {index}, json_group_array(json_array({', '.join(tables[table][:-1])})),"
            f" CAST(group_concat(CAST({tables[table][-1]} AS BLOB), '') AS BLOB),"
            f" group_concat(coalesce(length(CAST({tables[table][-1]} AS BLOB)), -1), ',')"
            f" FROM {table} WHERE run_id = ?"
            for index, table in enumerate(names)
        )
        for index, others, joined, lengths in await driver.execute_fetchall(
            sql, (run_id,) * len(names)
        ):
            columns = _columns(orjson.loads(others), len(tables[names[index]]) - 1)
            values = json_values(_split(joined, lengths), not_json=_not_json)
            out[names[index]] = [*columns, values]
        return out
    width = max(map(len, tables.values()))
    sql = " UNION ALL ".join(
        f"SELECT {index}, {', '.join(_padded(tables[table], width))} FROM {table} WHERE run_id = ?"
        for index, table in enumerate(names)
    )
    rows = await driver.execute_fetchall(sql, (run_id,) * len(names))
    by_table: dict[int, list[Any]] = {index: [] for index in range(len(names))}
    for row in rows:
        by_table[row[0]].append(row)
    for index, table in enumerate(names):
        columns = _columns(by_table[index], width + 1)
        out[table] = [*columns[1 : len(tables[table])], json_values(columns[-1])]
    return out


class _NotJson(Exception):
    """A value of the JSON column read as bytes is not JSON: read as stored instead."""


def _not_json(value: Any) -> Any:
    if value is None:  # a NULL
        return None
    raise _NotJson


def _split(joined: bytes | None, lengths: str | None) -> list[bytes | None]:
    """Values read as one blob and their lengths (-1: NULL)."""
    if lengths is None:
        return []
    data, at = joined or b"", 0
    values: list[bytes | None] = []
    for length in map(int, lengths.split(",")):
        if length < 0:
            values.append(None)
            continue
        values.append(data[at : at + length])
        at += length
    return values


def _padded(columns: Sequence[str], width: int) -> list[str]:
    """``columns`` with NULLs before the last, ``width`` in all."""
    return [*columns[:-1], *["NULL"] * (width - len(columns)), columns[-1]]


def _columns(rows: Sequence[Sequence[Any]], width: int) -> list[Sequence[Any]]:
    """Rows as columns."""
    return list(zip(*rows, strict=True)) if rows else [()] * width


def json_values(
    values: Sequence[Any], *, not_json: Callable[[Any], Any] = lambda value: value
) -> list[Any]:
    """Each JSON text parsed (``json_value``): natively for all at once when orjson reads each
    (no Python frame per item); else one by one, ``not_json`` of each that is not a JSON text
    (a text of another form, a value of another type) as it is."""
    try:
        return list(map(orjson.loads, values))
    except (orjson.JSONDecodeError, TypeError):
        return [_json_or(value, not_json) for value in values]


def _json_or(value: Any, not_json: Callable[[Any], Any]) -> Any:
    if isinstance(value, str | bytes | memoryview):
        try:
            return json_value(value)
        except ValueError:
            pass
    return not_json(value)


def json_value(text: str | bytes | memoryview) -> Any:
    """A JSON text's value: natively for what orjson reads (every canonical payload), the rest
    (integers beyond 64 bits, NaN, UTF-16 text) as ``json`` reads it; ValueError if neither."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(bytes(text) if isinstance(text, memoryview) else text)


#: events per joined read: bounds the texts held at once (~0.5 KB an event); the next chunk is
#: read while this one is hashed
CHUNK_EVENTS = 2048


def _chunk_field_sql(name: str, sqlite: bool) -> str:
    """SQL for a field of ``CHUNK_FIELDS`` as ``models.chain_joined`` reads it: as stored, an
    instant as ``2026-11-03 09:00:00.001000`` (UTC), a NULL as a backslash."""
    if name in INSTANT_FIELDS and not sqlite:
        name = f"to_char({name} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')"
    elif name == "schema_version" and not sqlite:
        name = f"CAST({name} AS TEXT)"
    return f"coalesce({name}, {_MISSING})"


@functools.cache
def _joined_query(sqlite: bool) -> str:
    """One chunk of a run's events (``lower < sequence <= upper``) as joined columns
    (``models.chain_joined.ChainChunk``), and how many of its rows have the stored types
    (SQLite keeps any type in any column), then the inline payloads: PostgreSQL's as an
    array, SQLite's as one blob and their lengths (``models.chain_joined.split_payloads``). The
    database only reads and joins the stored values: ``models.chain_joined`` writes the
    chained texts from them (the database's printf / format took more than all the rest)."""
    if sqlite:
        # SQLite orders NULL < numbers < text < blob: a text or a number is less than the
        # empty blob, a blob is not, a NULL is not counted (``models.chain_joined`` refuses a
        # number where the template writes a text and a text where it writes a number)
        stored = ("previous_hash", "hash", *CHUNK_FIELDS)
        typed = "sum(" + " AND ".join(f"{name} < x''" for name in stored)
        typed += " AND (payload IS NULL OR payload >= x''))"
        join, sequence = "group_concat", "sequence"
        # one row, so one step of the statement: aiosqlite's thread takes the GIL for each
        # step, which it waits for while the previous chunk is hashed
        payloads = ", CAST(group_concat(payload, '') AS BLOB), group_concat(length(payload), ',')"
    else:
        typed = "count(*)"
        join, sequence = "string_agg", "CAST(sequence AS TEXT)"
        payloads = ", array_agg(payload) FILTER (WHERE payload IS NOT NULL)"
    # SQLite evaluates a separator for each row: a literal line feed is a constant, char(10)
    # a call
    separator = f"'{FIELD_SEPARATOR}'" if sqlite else "E'\\n'"
    fields = ", ".join(
        f"{join}({_chunk_field_sql(name, sqlite)}, {separator})" for name in CHUNK_FIELDS
    )
    inline = "payload IS NOT NULL" if sqlite else "CASE WHEN payload IS NULL THEN '0' ELSE '1' END"
    selected = (
        f"SELECT count(*), {typed}, {join}({sequence}, ','),"
        f" {join}(coalesce(previous_hash, {_MISSING}), ','), {join}(coalesce(hash, {_MISSING}),"
        f" ','), {fields}, {join}({inline}, ''){payloads}"
    )
    # the aggregates read the rows in one order, the joined sequences show which (any other
    # than ascending does not verify): SQLite's in the order of the primary key's index, which
    # it reads the range from (a subquery ordering them would copy every row once more);
    # PostgreSQL's in the order of the subquery
    if sqlite:
        return f"{selected} FROM execution_events {_RANGE[sqlite]}"
    columns = ", ".join(["sequence", "previous_hash", "hash", *CHUNK_FIELDS, "payload"])
    return (
        f"{selected} FROM (SELECT {columns} FROM execution_events {_RANGE[sqlite]}"
        " ORDER BY sequence) AS events"
    )


_RANGE = {
    True: "WHERE run_id = ? AND sequence > ? AND sequence <= ?",
    False: "WHERE run_id = $1 AND sequence > $2 AND sequence <= $3",
}


def _chunk(row: Sequence[Any], sqlite: bool) -> ChainChunk | None:
    """The chunk of a ``_joined_query`` row, None if a value is not of its stored type."""
    count, typed, sequences, previous, hashes, *rest = row
    fields, (inline, *payload_columns) = (
        rest[: len(CHUNK_FIELDS)],
        rest[len(CHUNK_FIELDS) :],
    )
    if count and typed != count:
        return None
    if sqlite:
        payloads = split_payloads(*payload_columns)
        if payloads is None:
            return None
    else:
        payloads = payload_columns[0] or []
    return ChainChunk(count, sequences, previous, hashes, fields, inline, payloads)


def stored_header_genesis(record: Any) -> str | None:
    """``header_genesis`` of a stored header (JSON text or value); None when it is not a JSON
    object (the general path names what is wrong)."""
    try:
        header = json.loads(record) if isinstance(record, str | bytes) else record
    except ValueError:
        return None
    return header_genesis(header) if isinstance(header, dict) else None


def _chunk_bounds(total: int) -> list[tuple[int, int]]:
    """The ranges of sequences (``lower < sequence <= upper``) read as chunks: a smaller
    first one (nothing is hashed until it is read), then ``CHUNK_EVENTS`` each; one empty
    range for an empty run."""
    first = max(1, CHUNK_EVENTS // 4)
    lowers = [0, *range(first, total, CHUNK_EVENTS)]
    return list(zip(lowers, [*lowers[1:], max(total, first)], strict=True))


async def verify_intact_chain(
    conn: AsyncConnection,
    run_id: str,
    *,
    on_events: Callable[[ChainedEvents], None] | None = None,
) -> ChainVerification | None:
    """The run's chain verification if its chain and header head are intact, else None; from
    joined texts, one read per chunk, the next ones under way while one is checked.
    ``on_events``: called with the events of each chunk as it verifies (the full check's
    work on them overlaps the next chunk's read); they are the run's only if it verifies."""
    sqlite = conn.dialect.name == "sqlite"
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
    heads = await _fetch(
        conn,
        "SELECT head_sequence, head_hash, (SELECT count(*) FROM execution_events"
        f" WHERE run_id = runs.run_id), record FROM runs WHERE run_id = {'?' if sqlite else '$1'}",
        (run_id,),
    )
    if not heads:
        return None
    head_sequence, head_hash, total, record = heads[0]
    genesis = stored_header_genesis(record)
    if genesis is None:
        return None
    # every row of the run is in one of the ranges read: any other row (a sequence out of
    # range or of another type) is counted in ``total`` but in no chunk
    if total != head_sequence or type(total) is not int:
        return None
    query = _joined_query(sqlite)

    def read(bounds: tuple[int, int]) -> asyncio.Future[Any]:
        if sqlite:
            return asyncio.ensure_future(driver.execute_fetchall(query, (run_id, *bounds)))
        return asyncio.ensure_future(driver.fetch(query, run_id, *bounds))

    # SQLite's reads queue on aiosqlite's thread, which takes the next one as soon as it has
    # handed over a chunk: with two queued, it computes the next chunk (without the GIL) while
    # this one is hashed, instead of waiting for the GIL (held by the hashing) to start it.
    # asyncpg runs one statement at a time on a connection.
    ahead = 2 if sqlite else 1
    bounds = _chunk_bounds(total)
    reads = collections.deque(map(read, bounds[:ahead]))
    check = JoinedChainCheck(run_id, on_events=on_events, genesis=genesis)
    try:
        for index in range(len(bounds)):
            rows = await reads.popleft()
            if index + ahead < len(bounds):
                reads.append(read(bounds[index + ahead]))
                # the read is sent before this chunk is hashed (a loop turn or two)
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            chunk = _chunk(rows[0], sqlite)
            if chunk is None or not check.add(chunk):
                return None
    finally:
        # the connection is free again before it is returned (the general path reads next)
        await asyncio.gather(*reads, return_exceptions=True)
    return check.verification(expected_head=(head_sequence, head_hash))
