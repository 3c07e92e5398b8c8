"""Alertmanager fingerprints and the incident each one was taken into, for ever (migration
0006): the first delivery claims the fingerprint, every later one only counts."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from stores.sql import schema
from stores.sql.database import Database, utc


def _row(row: Any) -> dict[str, Any]:
    return {
        "fingerprint": row.fingerprint,
        "incident_id": row.incident_id,
        "action": row.action,
        "alertname": row.alertname,
        "matched_by": row.matched_by,
        "matched_value": row.matched_value,
        "deliveries": row.deliveries,
        "first_seen": utc(row.first_seen).isoformat(),
        "last_seen": utc(row.last_seen).isoformat(),
    }


class SqlAlertFingerprints:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def taken(self, fingerprint: str, at: datetime) -> dict[str, Any] | None:
        """The fingerprint's row with this delivery counted, or None when it was never taken."""
        table = schema.alert_fingerprints
        async with self.db.transaction() as conn:
            done = await conn.execute(
                update(table)
                .where(table.c.fingerprint == fingerprint)
                .values(deliveries=table.c.deliveries + 1, last_seen=at)
            )
            if done.rowcount != 1:
                return None
            row = (
                await conn.execute(select(table).where(table.c.fingerprint == fingerprint))
            ).one()
        return _row(row)

    async def claim(
        self,
        fingerprint: str,
        incident_id: str,
        *,
        action: str,
        alertname: str | None,
        matched_by: str,
        matched_value: str,
        at: datetime,
    ) -> dict[str, Any]:
        """Map ``fingerprint`` to ``incident_id`` unless a concurrent delivery did first: the
        row that holds (the winner's, when it was not this one)."""
        table = schema.alert_fingerprints
        insert = pg_insert if self.db.is_postgresql else sqlite_insert
        async with self.db.transaction() as conn:
            await conn.execute(
                insert(table)
                .values(
                    fingerprint=fingerprint,
                    incident_id=incident_id,
                    action=action,
                    alertname=alertname,
                    matched_by=matched_by,
                    matched_value=matched_value[:512],
                    deliveries=1,
                    first_seen=at,
                    last_seen=at,
                )
                .on_conflict_do_nothing(index_elements=["fingerprint"])
            )
            row = (
                await conn.execute(select(table).where(table.c.fingerprint == fingerprint))
            ).one()
        return _row(row)

    async def for_incident(self, incident_id: str) -> list[dict[str, Any]]:
        """The alerts taken into ``incident_id``, first seen first."""
        table = schema.alert_fingerprints
        async with self.db.read() as conn:
            rows = await conn.execute(
                select(table)
                .where(table.c.incident_id == incident_id)
                .order_by(table.c.first_seen, table.c.fingerprint)
            )
            return [_row(r) for r in rows]
