"""Fault injection: a PostgreSQL cluster of its own (initdb/pg_ctl on a free port) crashes
under concurrent ingestion over the API and is back 10 s later. Clients see 503 (with
Retry-After) meanwhile, send again, and every event they had acknowledged is recorded, once,
in intact chains. ``python -m bench.chaos`` runs more clients."""

from __future__ import annotations

from pathlib import Path

from bench.chaos_postgres import ingestion_through_outage

CLIENTS, EVENTS = 4, 12


async def test_every_acknowledged_event_survives_a_database_crash(tmp_path: Path) -> None:
    row, unavailable = await ingestion_through_outage(tmp_path, CLIENTS, EVENTS)
    assert unavailable > 0  # the outage fell mid-stream: clients were told to come back
    assert row.tried == CLIENTS  # runs, one per client
    assert (row.completed, row.lost, row.duplicated) == (CLIENTS, 0, 0), row
    assert row.intact == CLIENTS
