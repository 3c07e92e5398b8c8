"""The people a run learns of, written by the ledger's batch writer (SQLite and PostgreSQL):
each new one registered once in the governance log in the transaction of the append it came
with, the log one chain under racing writers of both paths, and a stale head writing nothing
(the general path then registers them, once)."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from models.governance import GovernanceKind
from models.privacy import RunSubject, SubjectKind
from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.governance import SqlGovernanceLog
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault
from tests.stores.test_write_behind import Statements, event_, new_run


def person(name: str) -> RunSubject:
    return RunSubject(subject_id=f"customer:{name}", kind=SubjectKind.PERSON, source="provider:crm")


async def registrations(database: Database, run_id: str) -> list[str]:
    entries = await SqlGovernanceLog(database).entries(run_id)
    assert {e.kind for e in entries} <= {GovernanceKind.SUBJECT_REGISTERED}
    return [e.subject_id or "" for e in entries]


async def test_subjects_go_in_the_batch_writers_transaction_each_registered_once(
    ledger: SqlLedger, database: Database
) -> None:
    runs = [await new_run(ledger) for _ in range(2)]
    for run_id in runs:
        await ledger.append(run_id, event_(0))  # heads cached: the batch writer's path
    await ledger.vault.add_subjects(runs[0], [person("known")])
    watch = Statements(database)
    try:
        futures = [
            await ledger.submit(runs[0], [event_(1)], subjects=[person("a"), person("known")]),
            await ledger.submit(runs[1], [event_(1)], subjects=[person("a")]),
            await ledger.submit(runs[0], [event_(2)], subjects=[person("a"), person("b")]),
        ]
        await asyncio.wait(futures)
    finally:
        watch.close()
    assert [f.exception() for f in futures] == [None, None, None]
    # one transaction of the batch writer, nothing through the pool's general path
    assert watch.engine_sql == [] and len(watch.batches) == 1
    assert await registrations(database, runs[0]) == [
        "customer:known",
        "customer:a",
        "customer:b",
    ]
    assert await registrations(database, runs[1]) == ["customer:a"]
    assert sorted(s["subject_id"] for s in await ledger.vault.subjects(runs[0])) == [
        "customer:a",
        "customer:b",
        "customer:known",
    ]
    assert await SqlGovernanceLog(database).verify() == []
    for run_id in runs:
        assert (await ledger.verify(run_id)).intact


async def test_racing_registrations_of_both_paths_keep_one_governance_chain(
    database: Database, tmp_path: Path
) -> None:
    """Batch-writer registrations of two ledgers (their own connections) race the general
    path's (``add_subjects`` through the pool): the log stays one chain with no position
    taken twice, every subject registered once for its run."""
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    ledgers = [SqlLedger(database, artifacts) for _ in range(2)]
    runs = [await new_run(ledgers[i % 2]) for i in range(6)]
    for i, run_id in enumerate(runs):
        await ledgers[i % 2].append(run_id, event_(0))
    vault = SqlRawVault(database, artifacts)

    async def recorder(i: int) -> None:
        run_id, ledger = runs[i], ledgers[i % 2]
        for k in range(1, 6):
            if k % 2:  # an awaited append between the submits
                await ledger.append(run_id, event_(k))
            commit = await ledger.submit(run_id, [event_(10 + k)], subjects=[person(f"{i}-{k}")])
            await commit

    async def general(i: int) -> None:
        for k in range(5):
            await vault.add_subjects(runs[i], [person(f"g{i}-{k}")])

    await asyncio.gather(*(recorder(i) for i in range(6)), *(general(i) for i in range(3)))
    assert await SqlGovernanceLog(database).verify() == []
    for i, run_id in enumerate(runs):
        registered = await registrations(database, run_id)
        assert Counter(registered).most_common(1)[0][1] == 1
        expected = {f"customer:{i}-{k}" for k in range(1, 6)}
        if i < 3:
            expected |= {f"customer:g{i}-{k}" for k in range(5)}
        assert set(registered) == expected
        assert (await ledgers[i % 2].verify(run_id)).intact


async def test_a_stale_head_with_subjects_writes_nothing_then_registers_them_once(
    ledger: SqlLedger, database: Database, tmp_path: Path
) -> None:
    """A cached head another writer moved: the batch writer writes neither the events nor
    the subjects of that batch; the general path writes them from the re-read head and
    registers each subject once."""
    runs = [await new_run(ledger) for _ in range(2)]
    for run_id in runs:
        await ledger.append(run_id, event_(0))
    other = SqlLedger(database, LocalArtifactStore(tmp_path / "other"), group_commit=False)
    await other.append(runs[1], event_(1))  # runs[1]'s cached head is now stale
    futures = [
        await ledger.submit(runs[0], [event_(1)], subjects=[person("x")]),
        await ledger.submit(runs[1], [event_(2)], subjects=[person("x"), person("y")]),
    ]
    await asyncio.wait(futures)
    assert [f.exception() for f in futures] == [None, None]
    assert futures[1].result()[0].sequence == 3
    assert await registrations(database, runs[0]) == ["customer:x"]
    assert await registrations(database, runs[1]) == ["customer:x", "customer:y"]
    assert await SqlGovernanceLog(database).verify() == []
    for run_id in runs:
        assert (await ledger.verify(run_id)).intact


async def test_a_run_starts_with_its_subjects_in_one_commit(
    ledger: SqlLedger, database: Database
) -> None:
    """``record_run``'s start (``runtime.privacy.redaction.start_run`` with subjects): the run,
    its data key and its subjects with their registrations go in one transaction, one commit
    (one sync of the disk before the first step, not two); starting it again registers none
    twice, and a start refused for another header registers none."""
    from datetime import UTC, datetime

    from models import RunRecord
    from models.errors import ConflictError
    from models.redaction import redaction_policy
    from runtime.privacy.redaction import start_run
    from stores.sql import schema
    from stores.sql.privacy import key_scope

    customer = RunSubject(subject_id="customer:c-1", kind=SubjectKind.END_USER, source="label")
    run = RunRecord(
        run_id=f"start-{uuid.uuid4().hex[:10]}",
        graph_id="g",
        graph_version="1",
        created_at=datetime(2026, 12, 3, tzinfo=UTC),
    )
    policy = redaction_policy("redact-v1", frozenset())
    watch = Statements(database)
    try:
        assert await start_run(ledger, run, [], policy, [customer, person("p")])
    finally:
        watch.close()
    assert watch.commits == 1
    assert await registrations(database, run.run_id) == ["customer:c-1", "customer:p"]
    subjects = {s["subject_id"]: s for s in await ledger.vault.subjects(run.run_id)}
    assert subjects["customer:c-1"]["primary"] and not subjects["customer:p"]["primary"]
    async with database.read() as conn:  # the run's data key came with it
        keys = (
            await conn.execute(
                select(schema.data_keys.c.key_id).where(
                    schema.data_keys.c.subject_id == key_scope(run.run_id)
                )
            )
        ).all()
    assert len(keys) == 1

    # again with the same header: nothing new (the run was there, its subjects too)
    assert not await start_run(ledger, run, [], policy, [customer])
    assert await registrations(database, run.run_id) == ["customer:c-1", "customer:p"]

    # another header under the same id: refused, and nobody registered under it
    other = run.model_copy(update={"graph_version": "2"})
    with pytest.raises(ConflictError):
        await start_run(ledger, other, [], policy, [person("q")])
    assert await registrations(database, run.run_id) == ["customer:c-1", "customer:p"]
