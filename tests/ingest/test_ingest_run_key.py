"""An ingested run's data key is made with the run: its ``data_keys`` row is committed in the
transaction that creates the run (``SqlLedger.start_run(run_key=True)``), so the first batch
that seals raw content sends no statement about keys. A start that writes nothing (the run
exists, or its transaction fails) leaves no key; the raw content sealed under the key opens,
and deleting the person it names destroys it. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ingest import ingest_events, ingest_run
from models import ExecutionEventType, PromptArtifact, RunRecord
from models.errors import ConflictError, SequenceConflictError
from models.ingest import IngestEventBatch, IngestRunHeader
from models.privacy import RawEvidenceState
from models.redaction import address_subject
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql import schema
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_shred import key_scope
from tests.ingest.test_ingest_subjects import _Statements
from tests.stores.test_write_behind import T0, event_, prompt_of_another_run

pytestmark = pytest.mark.asyncio(loop_scope="session")

START = datetime(2026, 1, 1, tzinfo=UTC)
ADA = "ada.lovelace@example.com"


def _stores(database: Database, tmp_path: Path) -> tuple[SqlLedger, LocalArtifactStore]:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, LocalKeyEncryptionKey(KEK))
    return SqlLedger(database, artifacts, vault=vault), artifacts


KEK = os.urandom(32)


def _header(run_id: str, prompt: str = "You help.") -> IngestRunHeader:
    return IngestRunHeader.model_validate(
        {"run_id": run_id, "started_at": START.isoformat(), "system_prompt": prompt}
    )


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


async def _keys(database: Database, run_id: str) -> list[Any]:
    k = schema.data_keys.c
    async with database.read() as conn:
        return list(
            (
                await conn.execute(
                    select(k.key_id, k.wrapped_key).where(k.subject_id == key_scope(run_id))
                )
            ).all()
        )


async def test_the_run_s_key_is_committed_with_it_and_seals_its_first_batch(
    database: Database, tmp_path: Path
) -> None:
    ledger, artifacts = _stores(database, tmp_path)
    run_id = f"key-{uuid.uuid4().hex[:8]}"
    await ingest_run(ledger, artifacts, _header(run_id))
    (key,) = await _keys(database, run_id)  # durable with the run, before any seal
    assert key.wrapped_key is not None

    watch = _Statements(database)
    try:
        await ingest_events(
            ledger, artifacts, SqlEvidenceReader(database), run_id, _batch(1, [f"mail {ADA}"])
        )
    finally:
        watch.close()
    assert watch.sql and not [s for s in watch.sql if "data_keys" in s]

    raw = await ledger.vault.raw_evidence(run_id, await _sealed(database, run_id), decrypt=True)
    assert raw.state is RawEvidenceState.AVAILABLE and ADA.encode() in (raw.content or b"")
    k = schema.raw_payloads.c
    async with database.read() as conn:
        used = set(
            (
                await conn.execute(
                    select(k.key_id).where(k.run_id == run_id, k.key_id.is_not(None))
                )
            ).scalars()
        )
    assert used == {key.key_id}
    assert (await ledger.verify(run_id)).intact

    # erasure reaches it: deleting Ada destroys the run's key
    subject = address_subject(ADA)
    assert subject is not None
    _, _, destroyed = await ledger.vault.shred_subject([run_id], subject, "req-test")
    assert destroyed == 1
    (key,) = await _keys(database, run_id)
    assert key.wrapped_key is None


async def _sealed(database: Database, run_id: str) -> int:
    """The sequence of the run's first event whose raw content was sealed."""
    k = schema.raw_payloads.c
    async with database.read() as conn:
        raw_id = (
            await conn.execute(
                select(k.raw_id)
                .where(k.run_id == run_id, k.ciphertext.is_not(None), k.raw_id.like("event:%"))
                .limit(1)
            )
        ).scalar_one()
    return int(raw_id.rsplit(":", 1)[1])


async def test_a_start_that_writes_nothing_keeps_no_key(database: Database, tmp_path: Path) -> None:
    ledger, artifacts = _stores(database, tmp_path)
    run_id = f"key-{uuid.uuid4().hex[:8]}"
    await ingest_run(ledger, artifacts, _header(run_id))
    # another process (no cached key, no cached head): the same header, then another one
    other, _ = _stores(database, tmp_path)
    result = await ingest_run(other, artifacts, _header(run_id))
    assert result.duplicates == 1 and not result.recorded
    with pytest.raises(ConflictError):
        await ingest_run(other, artifacts, _header(run_id, prompt="Another prompt."))
    assert len(await _keys(database, run_id)) == 1


async def test_a_start_that_fails_after_its_run_row_keeps_no_key(
    database: Database, tmp_path: Path
) -> None:
    """Its events' transaction fails after the run's row and key went in (a prompt artifact
    id taken by another run): neither stays, and the run's next start makes its key."""
    ledger, _ = _stores(database, tmp_path)
    prompt: PromptArtifact = await prompt_of_another_run(ledger, "taken-key")
    run_id = f"key-{uuid.uuid4().hex[:8]}"
    record = RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    events = [event_(0), NewEvent("s", ExecutionEventType.PROMPT_COMPILED, T0, record=prompt)]
    with pytest.raises((ConflictError, SequenceConflictError)):
        await ledger.start_run(record, events, run_key=True)
    assert await _keys(database, run_id) == []
    assert await ledger.start_run(record, [event_(0)], run_key=True)
    assert len(await _keys(database, run_id)) == 1


async def test_concurrent_starts_each_get_their_own_answer(
    database: Database, tmp_path: Path
) -> None:
    """Headers of many runs at once (group-committed): each run and its key is written,
    and the header sent twice meanwhile is a duplicate, not a second key."""
    import asyncio

    ledger, artifacts = _stores(database, tmp_path)
    run_ids = [f"key-{uuid.uuid4().hex[:8]}" for _ in range(6)]
    results = await asyncio.gather(
        *(ingest_run(ledger, artifacts, _header(r)) for r in [*run_ids, run_ids[0]]),
        return_exceptions=True,
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sorted(r.recorded for r in results if not isinstance(r, BaseException)) == [
        0,
        *[1] * 6,
    ]
    k = schema.data_keys.c
    async with database.read() as conn:
        counts: dict[str, int] = dict(
            (
                await conn.execute(
                    select(k.subject_id, func.count())
                    .where(k.subject_id.in_([key_scope(r) for r in run_ids]))
                    .group_by(k.subject_id)
                )
            ).all()
        )
    assert counts == {key_scope(r): 1 for r in run_ids}
