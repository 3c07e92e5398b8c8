"""A PostgreSQL instance of its own (``initdb`` and ``pg_ctl`` on a free port), stopped for
about ten seconds while clients ingest over the API. Used by ``tests/chaos`` (few clients)
and ``python -m bench.chaos`` (more).

Each client sends its run's events one at a time and, like any client honouring the API's
answers, sends an event again after a 503 until it is acknowledged (200 or 201). The database
is stopped with ``pg_ctl -m immediate`` (a crash: no checkpoint, clients' connections cut)
once a third of the events are acknowledged, and started again ten seconds later. Lost: an
acknowledged event that is not recorded (with its content) afterwards; duplicated: a client
event recorded twice.
"""

from __future__ import annotations

import asyncio
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from bench.chaos_row import Row
from devstack.ports import free_ports
from ingest.recorder import content_digest, marker_of
from models.ingest import IngestEventBatch
from stores.artifacts import LocalArtifactStore
from stores.sql.database import open_database
from stores.sql.ledger import SqlLedger
from worker.settings import Settings

TOKEN = "chaos-admin"
#: what a client waits before sending again after a 503 (it may honour Retry-After instead)
RESEND_S = 0.2


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1])


@dataclass
class OwnPostgres:
    """A throwaway cluster on a free port (trust authentication, user ``postgres``), run as
    the ``postgres`` user when this process is root. Its directory is a new one directly under
    the system's temporary directory: a test's own (mode 0700, root's) is closed to that user."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="replaybook-pg-")))
    port: int = field(default_factory=lambda: free_ports(1)[0])

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [str(postgres_bin() / args[0]), *args[1:]]
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def crash(self) -> None:
        """Stop at once, as a crash would (no shutdown checkpoint; recovery at the next start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def destroy(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Client:
    run_id: str
    #: (sequence, digest) of every acknowledged event
    acknowledged: list[tuple[int, str]] = field(default_factory=list)
    unavailable: int = 0
    #: answers other than 200/201/503 (each one a failure of the scenario)
    unexpected: list[str] = field(default_factory=list)


def _event(run_id: str, sequence: int) -> dict[str, object]:
    return {"type": "user_message", "sequence": sequence, "content": f"{run_id} turn {sequence}"}


@dataclass
class Progress:
    """Acknowledged events of all clients; ``reached`` is set once there are ``threshold``."""

    threshold: int
    acknowledged: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self) -> None:
        self.acknowledged += 1
        if self.acknowledged >= self.threshold:
            self.reached.set()


async def _send(
    api: httpx.AsyncClient, client: Client, events: int, deadline: float, progress: Progress
) -> None:
    for sequence in range(1, events + 1):
        body = {"events": [_event(client.run_id, sequence)]}
        while time.monotonic() < deadline:
            answer = await api.post(f"/api/runs/{client.run_id}/events", json=body)
            if answer.status_code in (200, 201):
                event = IngestEventBatch.model_validate(body).events[0]
                client.acknowledged.append(
                    (sequence, content_digest(event.model_dump(mode="json")))
                )
                progress.add()
                break
            if answer.status_code == 503:
                client.unavailable += 1
                await asyncio.sleep(RESEND_S)
                continue
            client.unexpected.append(f"{answer.status_code} {answer.text[:200]}")
            return
        await asyncio.sleep(0.02)  # a client's pace: the outage falls mid-stream


async def ingestion_through_outage(
    root: Path, clients: int, events: int, outage_s: float = 10.0
) -> tuple[Row, int]:
    """The row, and how many 503 answers the clients saw (also in the row's note)."""
    row = Row(f"postgres down {outage_s:g} s, {clients} runs")
    pg = OwnPostgres()
    await asyncio.to_thread(pg.init)
    try:
        settings = Settings.from_env(
            {
                "REPLAYBOOK_HOME": str(root / "home"),
                "REPLAYBOOK_DATABASE_URL": pg.url,
                "TEMPORAL_ADDRESS": "127.0.0.1:1",  # ingestion needs no Temporal
                "REPLAYBOOK_LOG_FORMAT": "json",
            }
        )
        app = create_app(settings, ApiConfig(tokens={TOKEN: frozenset({Role.ADMIN})}))
        started = datetime(2026, 1, 1, tzinfo=UTC).isoformat()
        runs = [Client(f"chaos-pg-{n}") for n in range(clients)]
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://api",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        ) as api:
            for client in runs:
                created = await api.post(
                    "/api/runs", json={"run_id": client.run_id, "started_at": started}
                )
                assert created.status_code == 201, created.text
            deadline = time.monotonic() + 120 + outage_s
            progress = Progress(threshold=clients * events // 3)
            outage = asyncio.create_task(_outage(pg, progress, outage_s))
            senders = asyncio.gather(*(_send(api, c, events, deadline, progress) for c in runs))
            await senders
            await outage
        await app.state.api.close()
        row.tried = clients  # runs, one per client
        unavailable = sum(c.unavailable for c in runs)
        row.extra = (
            f"{clients * events} events, {unavailable} answers 503 during the outage, each "
            "event sent again until acknowledged"
        )
        unexpected = [u for c in runs for u in c.unexpected]
        if unexpected:
            raise AssertionError(f"answers other than 200/201/503: {unexpected[:3]}")
        await _check(pg.url, root, runs, events, row)
        return row, unavailable
    finally:
        await asyncio.to_thread(pg.destroy)


async def _outage(pg: OwnPostgres, progress: Progress, outage_s: float) -> None:
    """Crash the database once a third of the events are acknowledged; start it ``outage_s``
    later."""
    await progress.reached.wait()
    await asyncio.to_thread(pg.crash)
    await asyncio.sleep(outage_s)  # the fault's length, not a synchronisation
    await asyncio.to_thread(pg.start)


async def _check(url: str, root: Path, runs: list[Client], events: int, row: Row) -> None:
    db = await open_database(url)
    try:
        ledger = SqlLedger(db, LocalArtifactStore(root / "home" / "artifacts"))
        for client in runs:
            events_of = await ledger.events(client.run_id)
            # a client event is recorded as one or more ledger events, ids ``run:seq:n:digest``
            copies = Counter(e.event_id for e in events_of)
            markers = {m for m in (marker_of(client.run_id, e) for e in events_of) if m}
            recorded = {m.sequence: m.digest for m in markers if m.sequence > 0}
            row.duplicated += sum(n - 1 for n in copies.values())
            row.duplicated += len([m for m in markers if m.sequence > 0]) - len(recorded)
            row.lost += sum(recorded.get(s) != d for s, d in client.acknowledged)
            row.completed += sorted(recorded) == list(range(1, events + 1))
            row.intact += (await ledger.verify(client.run_id)).intact
    finally:
        await db.dispose()
