"""Fault injection at a larger N than ``tests/chaos``: ``.venv/bin/python -m bench.chaos
[--runs N] [--kills K]``. Prints, per scenario, ``tried / completed / lost / duplicated /
chains intact / side effects left EXECUTING``.

Scenarios (what is measured here; see the report of issue 14 for what is not yet):
- ``ingest-race`` on SQLite and PostgreSQL: 8 concurrent writers per run, each sending the
  run's events (the same ones, in order) with a different event competing for every third
  sequence. Lost: an event acknowledged (200/201) whose content is not the one recorded at its
  sequence. Duplicated: a client sequence recorded twice. Completed: runs with every sequence.
- ``kill-mid-write`` on SQLite: a process SIGKILLed after dispatching a write; then one sweep
  after the lease. Left EXECUTING counts what the sweep did not turn UNKNOWN.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

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

PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
ROOT = Path(__file__).resolve().parents[1]
WRITERS = 8
EVENTS = 6
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Row:
    scenario: str
    tried: int = 0
    completed: int = 0
    lost: int = 0
    duplicated: int = 0
    intact: int = 0
    left_executing: int = 0


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


async def main(runs: int, kills: int, home: Path, dispatched: int) -> list[Row]:
    """Every scenario; the writers of ``kill-mid-write`` were killed before (``dispatched``)."""
    artifacts = LocalArtifactStore(home / "race-artifacts")
    db = await open_database(f"sqlite+aiosqlite:///{home / 'race.db'}")
    try:
        rows = [await ingest_race(db, artifacts, runs, "sqlite")]
    finally:
        await db.dispose()
    url = await create_scratch_database(PG_ADMIN_URL, "chaos")
    try:
        db = await open_database(url)
        try:
            rows.append(await ingest_race(db, artifacts, runs, "postgresql"))
        finally:
            await db.dispose()
    finally:
        await drop_scratch_database(PG_ADMIN_URL, url)
    rows.append(await kill_mid_write(kills, dispatched, home / "kill"))
    return rows


def _print(rows: list[Row]) -> None:
    print(
        f"{'scenario':28} tried / completed / lost / duplicated / chains intact / "
        "side effects left EXECUTING"
    )
    for r in rows:
        print(
            f"{r.scenario:28} {r.tried} / {r.completed} / {r.lost} / {r.duplicated} / "
            f"{r.intact} / {r.left_executing}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="runs per ingestion race")
    parser.add_argument("--kills", type=int, default=10, help="processes killed mid-write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dispatched = _kill_writers(args.kills, Path(tmp) / "kill")
        _print(asyncio.run(main(args.runs, args.kills, Path(tmp), dispatched)))
