"""Verification of an intact chain straight from the stored columns.

The database writes each event's chained bytes itself, from the fixed template of its
canonical metadata (``models.chain.metadata_bytes``): ``previous_hash ‖ metadata ‖
payload_hash`` as one text per row, the instants in ``format_instant`` form. Python then only
checks the order and the links and hashes each text (``models.chain.verify_linked_texts``),
which refuses any text that would need escaping (the template is canonical only without it).
Anything that does not verify answers None: the caller then takes the general path, which
names what is broken and where.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterable
from typing import Any

from sqlalchemy import String, case, cast, func, literal, select, type_coerce
from sqlalchemy.ext.asyncio import AsyncConnection

from models.chain import ChainVerification, LinkedText, verify_linked_texts
from stores.sql import schema


def _instant_text(column: Any, sqlite: bool) -> Any:
    """SQL for ``format_instant`` of a stored instant (``2026-11-03T09:00:00.001000Z``)."""
    if sqlite:  # SQLAlchemy stores "2026-11-03 09:00:00.001000"; any other form gives NULL
        stored = type_coerce(column, String)
        return case(
            (func.length(stored) == 26, func.replace(stored, " ", "T").concat("Z")),
            else_=None,
        )
    return func.to_char(func.timezone("UTC", column), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')


def _chained_text(sqlite: bool) -> Any:
    e = schema.execution_events.c
    parts: list[Any] = [
        e.previous_hash,
        '{"event_id":"',
        e.event_id,
        '","logical_time":"',
        _instant_text(e.logical_time, sqlite),
        '","payload_ref":"',
        e.payload_ref,
        '","recorded_at":"',
        _instant_text(e.recorded_at, sqlite),
        '","run_id":"',
        e.run_id,
        '","schema_version":',
        cast(e.schema_version, String),
        ',"sequence":',
        cast(e.sequence, String),
        ',"step_id":"',
        e.step_id,
        '","type":"',
        e.type,
        '"}',
        e.payload_hash,
    ]
    elements = [literal(p, String) if isinstance(p, str) else p for p in parts]
    return functools.reduce(lambda a, b: a.concat(b), elements)


def cast_rows(result: Any) -> Iterable[LinkedText]:
    """Rows unpack as tuples (SQLAlchemy 2); typed as what the query selects."""
    return typing.cast(Iterable[LinkedText], result)


async def verify_intact_chain(conn: AsyncConnection, run_id: str) -> ChainVerification | None:
    """The run's chain verification if its chain and header head are intact, else None."""
    r = schema.runs.c
    e = schema.execution_events.c
    head = (
        await conn.execute(select(r.head_sequence, r.head_hash).where(r.run_id == run_id))
    ).first()
    if head is None:
        return None
    result = await conn.execute(
        select(
            e.sequence,
            e.previous_hash,
            _chained_text(conn.dialect.name == "sqlite"),
            e.payload_hash,
            e.hash,
            e.payload,
        )
        .where(e.run_id == run_id)
        .order_by(e.sequence)
    )
    return verify_linked_texts(
        run_id, cast_rows(result), expected_head=(head.head_sequence, head.head_hash)
    )
