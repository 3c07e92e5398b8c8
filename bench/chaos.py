"""Fault injection at a larger N than ``tests/chaos``: ``.venv/bin/python -m bench.chaos
[--runs N] [--kills K] [--trials T] [--clients C] [--only NAME…]``. Prints, per scenario,
``tried / completed / lost / duplicated / chains intact / side effects left EXECUTING``
(and, in brackets, the time lost per fault and the 503 answers seen).

Scenarios:
- ``ingest-race`` on SQLite and PostgreSQL: 8 concurrent writers per run, each sending the
  run's events (the same ones, in order) with a different event competing for every third
  sequence. Lost: an event acknowledged (200/201) whose content is not the one recorded at its
  sequence. Duplicated: a client sequence recorded twice. Completed: runs with every sequence.
- ``kill-mid-write`` on SQLite: a process SIGKILLed after dispatching a write; then one sweep
  after the lease. Left EXECUTING counts what the sweep did not turn UNKNOWN.
- ``kill-worker-replay`` / ``kill-worker-incident`` / ``kill-temporal``
  (``bench.chaos_temporal``): SIGKILL of the worker during ``--repeat`` replays and during
  incidents (a new worker completes them), SIGKILL of the Temporal dev server and a restart
  (the running worker resumes). Time lost: from the kill to the next event recorded (after a
  Temporal kill: the first once the restarted server answers).
- ``postgres-outage`` (``bench.chaos_postgres``): a PostgreSQL cluster of its own stopped
  (``pg_ctl -m immediate``) for 10 s while clients ingest over the API; clients see 503 and
  send again. Lost: an acknowledged event not recorded afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.chaos_postgres import ingestion_through_outage
from bench.chaos_row import Row, render
from bench.chaos_temporal import incidents_under_fault, replays_under_fault, running_stack
from ingest import ingest_events, ingest_run
from ingest.recorder import content_digest, marker_of
from models import SideEffectRecord, SideEffectStatus
from models.errors import ConflictError, StoreError
from models.ingest import IngestEventBatch, IngestRunHeader
from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database, open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.side_effect_leases import sweep_expired_side_effects
from worker.logs import configure_logging

PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[1]
WRITERS = 8
EVENTS = 6
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(sequence: int, variant: str) -> dict[str, Any]:
    return {"type": "user_message", "sequence": sequence, "content": f"turn {sequence} {variant}"}


async def _writer(
    db: Database, artifacts: LocalArtifactStore, run_id: str, writer: int
) -> list[tuple[int, str]]:
    """Send the run's events one by one; returns (sequence, digest) of each acknowledged one."""
    ledger, evidence = SqlLedger(db, artifacts), SqlEvidenceReader(db)
    acknowledged = []
    for sequence in range(1, EVENTS + 1):
        variant = f"w{writer}" if sequence % 3 == 0 else "same"
        batch = IngestEventBatch.model_validate({"events": [_event(sequence, variant)]})
        for _ in range(5):  # a 503 (store busy or down) is retried, as a client would
            try:
                await ingest_events(ledger, artifacts, evidence, run_id, batch.events)
            except StoreError:
                continue
            except ConflictError:
                break  # refused (409): not acknowledged
            acknowledged.append((sequence, content_digest(batch.events[0].model_dump(mode="json"))))
            break
    return acknowledged


async def ingest_race(db: Database, artifacts: LocalArtifactStore, runs: int, name: str) -> Row:
    row = Row(f"ingest-race ({name})")
    run_ids = [f"chaos-{name}-{n}" for n in range(runs)]
    ledger = SqlLedger(db, artifacts)
    for run_id in run_ids:
        await ingest_run(ledger, artifacts, IngestRunHeader(run_id=run_id, started_at=T0))
    acks = await asyncio.gather(
        *(_writer(db, artifacts, run_id, w) for run_id in run_ids for w in range(WRITERS))
    )
    for index, run_id in enumerate(run_ids):
        markers = Counter(
            (m.sequence, m.digest)
            for m in (marker_of(run_id, e) for e in await ledger.events(run_id))
            if m is not None and m.sequence > 0
        )
        recorded = {sequence: digest for sequence, digest in markers}
        row.tried += 1
        row.duplicated += len(markers) - len(recorded)
        row.completed += sorted(recorded) == list(range(1, EVENTS + 1))
        for writer_acks in acks[index * WRITERS : (index + 1) * WRITERS]:
            row.lost += sum(recorded.get(s) != d for s, d in writer_acks)
        row.intact += (await ledger.verify(run_id)).intact
    return row


def _kill_writers(kills: int, home: Path) -> int:
    """Start ``kills`` writers one after another, SIGKILL each once its write is dispatched;
    returns how many got that far."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")} | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
    }
    dispatched = 0
    for n in range(kills):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.writer_child", f"chaos-kill-{n}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert child.stdout is not None
        dispatched += child.stdout.readline().strip() == b"DISPATCHED"
        child.send_signal(signal.SIGKILL)
        child.wait()
    return dispatched


async def kill_mid_write(kills: int, dispatched: int, home: Path) -> Row:
    """One sweep past the lease after ``_kill_writers``; counts what is still EXECUTING."""
    row = Row("kill-mid-write (sqlite)", tried=kills, completed=dispatched)
    db = await open_database(f"sqlite+aiosqlite:///{home / 'replaybook.db'}")
    try:
        ledger = SqlLedger(db, LocalArtifactStore(home / "artifacts"))
        later = ledger.clock() + timedelta(seconds=61)
        await sweep_expired_side_effects(ledger, 60, later)
        evidence = SqlEvidenceReader(db)
        for n in range(kills):
            run_id = f"chaos-kill-{n}"
            effects: list[SideEffectRecord] = await evidence.records(SideEffectRecord, run_id)
            row.left_executing += sum(e.status is SideEffectStatus.EXECUTING for e in effects)
            row.intact += (await ledger.verify(run_id)).intact
    finally:
        await db.dispose()
    return row


SCENARIOS = (
    "ingest-race",
    "kill-mid-write",
    "kill-worker-replay",
    "kill-worker-incident",
    "kill-temporal",
    "postgres-outage",
)


async def main(args: argparse.Namespace, home: Path, dispatched: int) -> list[Row]:
    """The scenarios in ``args.only``; the writers of ``kill-mid-write`` were killed before
    (``dispatched``)."""
    rows: list[Row] = []
    if "ingest-race" in args.only:
        artifacts = LocalArtifactStore(home / "race-artifacts")
        db = await open_database(f"sqlite+aiosqlite:///{home / 'race.db'}")
        try:
            rows.append(await ingest_race(db, artifacts, args.runs, "sqlite"))
        finally:
            await db.dispose()
        url = await create_scratch_database(PG_ADMIN_URL, "chaos")
        try:
            db = await open_database(url)
            try:
                rows.append(await ingest_race(db, artifacts, args.runs, "postgresql"))
            finally:
                await db.dispose()
        finally:
            await drop_scratch_database(PG_ADMIN_URL, url)
    if "kill-mid-write" in args.only:
        rows.append(await kill_mid_write(args.kills, dispatched, home / "kill"))
    if {"kill-worker-replay", "kill-worker-incident", "kill-temporal"} & set(args.only):
        async with running_stack(home / "temporal") as stack:
            if "kill-worker-replay" in args.only:
                rows.append(await replays_under_fault(stack, args.trials, "worker"))
            if "kill-worker-incident" in args.only:
                rows.append(await incidents_under_fault(stack, args.trials))
            if "kill-temporal" in args.only:
                rows.append(await replays_under_fault(stack, args.trials, "temporal"))
    if "postgres-outage" in args.only:
        row, _ = await ingestion_through_outage(home / "outage", args.clients, 30)
        rows.append(row)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per ingestion race")
    parser.add_argument("--kills", type=int, default=10, help="processes killed mid-write")
    parser.add_argument("--trials", type=int, default=5, help="faults per worker/Temporal scenario")
    parser.add_argument(
        "--clients", type=int, default=16, help="clients ingesting through the outage"
    )
    parser.add_argument(
        "--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS), help="scenarios to run"
    )
    args = parser.parse_args()
    configure_logging("auto", logging.WARNING)  # to stderr: stdout is the table
    with tempfile.TemporaryDirectory() as tmp:
        dispatched = 0
        if "kill-mid-write" in args.only:
            dispatched = _kill_writers(args.kills, Path(tmp) / "kill")
        print(render(asyncio.run(main(args, Path(tmp), dispatched))))
