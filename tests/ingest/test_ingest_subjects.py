"""The people an ingested batch names become data subjects of the run with the batch's events
(handed to the ledger with them, ``WriteBehindLedger.submit``), once each however many batches
name them again, on SQLite and PostgreSQL; a batch naming only known people sends nothing
about subjects to the database."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select

from ingest import ingest_events, ingest_run
from models.ingest import IngestEventBatch, IngestRunHeader
from models.redaction import address_subject
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql import schema
from stores.sql.batch_writer import batch_writer
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault

pytestmark = pytest.mark.asyncio(loop_scope="session")

START = datetime(2026, 1, 1, tzinfo=UTC)
ADA, GRACE = "ada.lovelace@example.com", "grace.hopper@example.org"


def _batch(first: int, lines: list[str]) -> Any:
    events = [
        {
            "type": "user_message",
            "content": line,
            "sequence": first + i,
            "at": (START + timedelta(seconds=first + i)).isoformat(),
        }
        for i, line in enumerate(lines)
    ]
    return IngestEventBatch.model_validate({"events": events}).events


class _Statements:
    """Every statement sent to ``db``: SQLAlchemy's and the batch writer's."""

    def __init__(self, db: Database) -> None:
        self.sql: list[str] = []
        self._engine = db.engine.sync_engine
        self._writer = batch_writer(db)
        event.listen(self._engine, "before_cursor_execute", self._on)
        self._writer.observers.append(self._on_batch)

    def _on(self, _c: Any, _cur: Any, statement: str, *_: Any) -> None:
        self.sql.append(statement)

    def _on_batch(self, statements: Any, _committed: bool) -> None:
        self.sql.extend(statements)

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._on)
        self._writer.observers.remove(self._on_batch)


async def _registrations(database: Database, run_id: str) -> int:
    """The run's entries in the governance log (one per subject registered)."""
    g = schema.governance_log.c
    async with database.read() as conn:
        return int(
            (await conn.execute(select(func.count()).where(g.run_id == run_id))).scalar_one()
        )


def _vaulted_ledger(
    database: Database, tmp_path: Path
) -> tuple[LocalArtifactStore, SqlRawVault, SqlLedger]:
    """Artifacts under the test's directory, a vault with a key of its own, their ledger."""
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, LocalKeyEncryptionKey(os.urandom(32)))
    return artifacts, vault, SqlLedger(database, artifacts, vault=vault)


async def test_people_become_subjects_with_their_events_once(
    database: Database, tmp_path: Path
) -> None:
    artifacts, vault, ledger = _vaulted_ledger(database, tmp_path)
    evidence = SqlEvidenceReader(database)
    run_id = f"subjects-{uuid.uuid4().hex[:8]}"
    header = IngestRunHeader.model_validate(
        {"run_id": run_id, "started_at": START.isoformat(), "labels": {}}
    )
    await ingest_run(ledger, artifacts, header)

    await ingest_events(ledger, artifacts, evidence, run_id, _batch(1, [f"write to {ADA}"]))
    subjects = {s["subject_id"] for s in await vault.subjects(run_id)}
    assert subjects == {address_subject(ADA)}

    watch = _Statements(database)
    try:  # Ada again: nothing about subjects is sent
        await ingest_events(ledger, artifacts, evidence, run_id, _batch(2, [f"cc {ADA} too"]))
    finally:
        watch.close()
    assert watch.sql and not [s for s in watch.sql if "run_subjects" in s]

    await ingest_events(
        ledger, artifacts, evidence, run_id, _batch(3, [f"and {GRACE}", f"and {ADA}"])
    )
    subjects = {s["subject_id"] for s in await vault.subjects(run_id)}
    assert subjects == {address_subject(ADA), address_subject(GRACE)}
    registrations = await _registrations(database, run_id)
    assert registrations == 2  # one each, whatever the batches named
    verification = await ledger.verify(run_id)
    assert verification.intact, verification.summary()


async def test_a_header_sent_again_registers_the_people_a_crash_left_out(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's start is committed, then the people its header names are registered: a
    process that dies in between leaves a run whose people a deletion would not find. The
    client, with no answer, sends the header again: that registers them (once)."""
    import ingest.core

    artifacts, vault, ledger = _vaulted_ledger(database, tmp_path)
    run_id = f"resent-{uuid.uuid4().hex[:8]}"
    header = IngestRunHeader.model_validate(
        {
            "run_id": run_id,
            "started_at": START.isoformat(),
            "initial_messages": [{"role": "user", "content": f"I am {ADA}, refund me"}],
        }
    )

    async def died(*_: Any) -> None:
        raise RuntimeError("the process died here")

    with monkeypatch.context() as patch:
        patch.setattr(ingest.core, "register_subjects", died)
        with pytest.raises(RuntimeError, match="died"):
            await ingest_run(ledger, artifacts, header)
    assert await ledger.get_run(run_id)  # started,
    assert await vault.subjects(run_id) == []  # but its person is not on record

    again = await ingest_run(ledger, artifacts, header)
    assert again.duplicates == 1
    assert {s["subject_id"] for s in await vault.subjects(run_id)} == {address_subject(ADA)}
    await ingest_run(ledger, artifacts, header)  # and once only, however often it comes
    registrations = await _registrations(database, run_id)
    assert registrations == 1


async def test_people_named_only_in_the_system_prompt_become_subjects(
    database: Database, tmp_path: Path
) -> None:
    """The header's system prompt and attachments are stored sanitized, their raw forms
    sealed under the run's key: the people they name are the run's subjects too, or a
    deletion of one of them would leave the run's key, and the raw prompt, readable."""
    artifacts, vault, ledger = _vaulted_ledger(database, tmp_path)
    run_id = f"prompt-{uuid.uuid4().hex[:8]}"
    header = IngestRunHeader.model_validate(
        {
            "run_id": run_id,
            "started_at": START.isoformat(),
            "system_prompt": f"Escalations go to {ADA}.",
            "attachments": {"owner": {"contact": GRACE}},
        }
    )
    await ingest_run(ledger, artifacts, header)
    subjects = {s["subject_id"] for s in await vault.subjects(run_id)}
    assert subjects == {address_subject(ADA), address_subject(GRACE)}
