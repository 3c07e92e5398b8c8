"""The stored facts the SLOs are computed from (``app/slo.py`` holds the objectives): plain
records, read in one pass per table."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from stores.sql import schema
from stores.sql.database import Database, utc

__all__ = ["IncidentFact", "SideEffectFact", "SqlSloFacts"]


def _record(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else json.loads(value)


@dataclass(frozen=True)
class SideEffectFact:
    run_id: str
    side_effect_id: str
    status: str
    #: when its last status was recorded (the ledger's clock)
    updated_at: datetime | None = None


@dataclass(frozen=True)
class IncidentFact:
    incident_id: str
    source_run_id: str
    record: dict[str, Any]


class SqlSloFacts:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def run_labels(self) -> dict[str, dict[str, Any]]:
        """run id -> the labels of its run record."""
        t = schema.runs.c
        async with self.db.read() as conn:
            rows = (await conn.execute(select(t.run_id, t.record))).all()
        return {row.run_id: _record(row.record).get("labels") or {} for row in rows}

    async def side_effects(self) -> list[SideEffectFact]:
        t = schema.side_effects.c
        async with self.db.read() as conn:
            query = select(t.run_id, t.side_effect_id, t.status, t.updated_at)
            rows = (await conn.execute(query)).all()
        return [
            SideEffectFact(r.run_id, r.side_effect_id, r.status, utc(r.updated_at)) for r in rows
        ]

    async def incidents(self) -> list[IncidentFact]:
        i = schema.incidents.c
        async with self.db.read() as conn:
            rows = (await conn.execute(select(i.incident_id, i.source_run_id, i.record))).all()
        return [IncidentFact(r.incident_id, r.source_run_id, _record(r.record)) for r in rows]

    async def incidents_with_regression_case(self) -> set[str]:
        c = schema.regression_cases.c
        async with self.db.read() as conn:
            return set((await conn.execute(select(c.incident_id))).scalars())

    async def event_counts(self, types: Iterable[str]) -> list[tuple[str, str, int]]:
        """(run id, event type, number of events) for each run with events of ``types``."""
        e = schema.execution_events.c
        query = (
            select(e.run_id, e.type, func.count())
            .where(e.type.in_([str(t) for t in types]))
            .group_by(e.run_id, e.type)
        )
        async with self.db.read() as conn:
            return [(run_id, type_, int(n)) for run_id, type_, n in await conn.execute(query)]

    async def tool_fixtures(self) -> list[tuple[str, dict[str, Any]]]:
        """(run id, stored record) of every tool fixture."""
        f = schema.tool_fixtures.c
        async with self.db.read() as conn:
            rows = (await conn.execute(select(f.run_id, f.record))).all()
        return [(run_id, _record(record)) for run_id, record in rows]
