"""Verification of an intact chain straight from the stored columns, through the raw driver.

The rows come from the driver's own cursor (no SQLAlchemy row or type processing), and every
event's hash is recomputed from its stored fields written into the fixed template of its
canonical metadata (``models.chain.TEMPLATE_LITERALS`` around ``TEMPLATE_FIELDS``):
``previous_hash ‖ metadata ‖ payload_hash``, the instants in ``format_instant`` form.

The chain-only check (``verify_intact_chain``) reads each chunk of events as one row of joined
columns (``string_agg`` / ``group_concat``: the stored values only) and ``models.chain_joined``
writes the chained texts from them, one join per event, the next chunks' reads under way while
one is hashed: no object per event but the texts, every check but the hashing one comparison
per chunk and column. The full check (``read_intact_chain`` with events) reads one row per
event, which its checks beyond the chain (``run_check``) need as ``StoredEvent``s, the database
writing each event's chained text with printf / format, and checks order, links, escapes and
hashes over whole columns (``models.chain.verify_chain_columns``); an intact run is read once.
Anything that does not verify answers None: the caller then takes the general path, which
names what is broken and where.
"""

from __future__ import annotations

import asyncio
import collections
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
from models.chain_joined import (
    CHUNK_FIELDS,
    FIELD_SEPARATOR,
    INSTANT_FIELDS,
    ChainChunk,
    JoinedChainCheck,
    split_payloads,
)

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


def _chunk_bounds(total: int) -> list[tuple[int, int]]:
    """The ranges of sequences (``lower < sequence <= upper``) read as chunks: a smaller
    first one (nothing is hashed until it is read), then ``CHUNK_EVENTS`` each; one empty
    range for an empty run."""
    first = max(1, CHUNK_EVENTS // 4)
    lowers = [0, *range(first, total, CHUNK_EVENTS)]
    return list(zip(lowers, [*lowers[1:], max(total, first)], strict=True))


async def _verify_joined(conn: AsyncConnection, run_id: str) -> ChainVerification | None:
    """``verify_intact_chain`` from joined texts, one read per chunk, the next ones under way
    while one is checked."""
    sqlite = conn.dialect.name == "sqlite"
    raw = await conn.get_raw_connection()
    driver: Any = raw.driver_connection
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
    check = JoinedChainCheck(run_id)
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
