"""Read-side views of runs for the CLI (and later the API)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from stores.sql import schema
from worker.stores import Stores


async def describe_run(stores: Stores, run_id: str) -> dict[str, Any]:
    """A run's header, pins, chain head, events and the evidence recorded beside them."""
    run = await stores.ledger.get_run(run_id)
    events = await stores.ledger.events(run_id)
    evidence: dict[str, list[dict[str, Any]]] = {}
    async with stores.db.read() as conn:
        for table in (schema.tool_fixtures, schema.prompt_artifacts, schema.side_effects):
            rows = (
                await conn.execute(select(table.c.record).where(table.c.run_id == run_id))
            ).all()
            evidence[table.name] = [row.record for row in rows]
    return {
        **run.model_dump(mode="json"),
        "event_count": len(events),
        "head_hash": events[-1].hash if events else None,
        "events": [e.model_dump(mode="json") for e in events],
        "fixtures": evidence["tool_fixtures"],
        "prompt_artifacts": evidence["prompt_artifacts"],
        "side_effects": evidence["side_effects"],
    }
