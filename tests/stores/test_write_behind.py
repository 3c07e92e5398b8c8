"""Group commit with cached heads and write-behind recording, on SQLite and PostgreSQL:
per-run order, many runs per transaction, the cached head checked by compare-and-set (and
re-read only on a conflict), the write-ahead points, and a crash that loses only what was
never acknowledged."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from models import ExecutionEventType, RunRecord, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash, canonicalize
from models.errors import ConflictError, SequenceConflictError
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.artifacts import LocalArtifactStore
from stores.sql import schema
from stores.sql.batch_writer import POSTGRES_LANES, batch_writer
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import NewEvent, SqlLedger
from tests.stores.write_behind_child import ACKED

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
E = ExecutionEventType
ROOT = Path(__file__).resolve().parents[2]


def event_(i: int) -> NewEvent:
    return NewEvent(f"s-{i}", E.MODEL_CALL, T0 + timedelta(seconds=i), payload={"i": i})


async def new_run(ledger: SqlLedger) -> str:
    run_id = f"wb-{uuid.uuid4().hex[:12]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    )
    return run_id


async def prompt_of_another_run(ledger: SqlLedger, text: str) -> Any:
    """A prompt artifact recorded by another run: appending it again to a run fails that
    run's transaction after its event rows were inserted (the artifact id is taken)."""
    from models import PromptArtifact

    prompt = PromptArtifact(
        artifact_id=f"pa-{uuid.uuid4().hex[:8]}",
        template_version="t1",
        compiled_hash=canonical_hash(text),
        content_ref=canonical_hash(text).removeprefix("sha256:"),
        token_count=1,
        compiled_at=T0,
    )
    other_run = await new_run(ledger)
    await ledger.append(other_run, NewEvent("s", E.PROMPT_COMPILED, T0, record=prompt))
    return prompt


async def payload_numbers(ledger: SqlLedger, run_id: str) -> list[int]:
    import json

    return [json.loads(data or b"{}")["i"] for _, data in await ledger.events_with_payloads(run_id)]


class Statements:
    """The SQL statements and commits sent while active: the engine's, and the batch
    writer's (a transaction per call)."""

    def __init__(self, db: Database) -> None:
        self.sql: list[str] = []
        self.commits = 0
        #: the batch writer's transactions, each the list of its statements
        self.batches: list[list[str]] = []
        #: the statements sent through SQLAlchemy's pool
        self.engine_sql: list[str] = []
        self._engine = db.engine.sync_engine
        self._writer = batch_writer(db)
        event.listen(self._engine, "before_cursor_execute", self._on_sql)
        event.listen(self._engine, "commit", self._on_commit)
        self._writer.observers.append(self._on_batch)

    def _on_sql(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.sql.append(statement)
        self.engine_sql.append(statement)

    def _on_commit(self, _conn: Any) -> None:
        self.commits += 1

    def _on_batch(self, statements: Sequence[str], committed: bool) -> None:
        self.batches.append(list(statements))
        self.sql.extend(statements)
        self.commits += committed

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._on_sql)
        event.remove(self._engine, "commit", self._on_commit)
        self._writer.observers.remove(self._on_batch)

    def head_reads(self) -> int:
        return sum(
            1
            for s in self.sql
            if s.lstrip().upper().startswith("SELECT") and "head_sequence" in s and "runs" in s
        )


async def test_submitted_events_keep_per_run_order_and_share_transactions(
    ledger: SqlLedger, database: Database
) -> None:
    runs = [await new_run(ledger) for _ in range(12)]
    watch = Statements(database)
    try:
        futures = []
        for i in range(10):  # interleaved: run 0 event 0, run 1 event 0, ...
            for run_id in runs:
                futures.append(await ledger.submit(run_id, [event_(i)], expected_sequence=i + 1))
        await ledger.flush()
    finally:
        watch.close()
    assert all(f.done() and f.exception() is None for f in futures)
    for run_id in runs:
        assert await payload_numbers(ledger, run_id) == list(range(10))
        verified = await ledger.verify(run_id)
        assert verified.intact and verified.head_sequence == 10
    # 120 appends of 12 runs: far fewer transactions than appends (many runs per commit)
    assert 1 <= watch.commits <= 40


async def test_a_cached_head_is_not_read_again(ledger: SqlLedger, database: Database) -> None:
    run_id = await new_run(ledger)
    await ledger.append(run_id, event_(0))  # the writer reads the head once, then caches it
    watch = Statements(database)
    try:
        for i in range(1, 6):
            await ledger.append(run_id, event_(i), expected_sequence=i + 1)
    finally:
        watch.close()
    assert watch.head_reads() == 0
    assert (await ledger.verify(run_id)).head_sequence == 6


async def test_a_head_moved_by_another_writer_fails_the_cas_and_is_read_again(
    ledger: SqlLedger, database: Database, tmp_path: Path
) -> None:
    run_id = await new_run(ledger)
    await ledger.append(run_id, event_(0))
    other = SqlLedger(database, LocalArtifactStore(tmp_path / "other"), group_commit=False)
    await other.append(run_id, event_(1))  # the first ledger's cached head is now stale
    # unconditional: written after the other writer's event, from the re-read head
    appended = await ledger.append(run_id, event_(2))
    assert appended.sequence == 3
    # conditional on what the stale cache believed: refused, nothing written
    with pytest.raises(SequenceConflictError):
        await ledger.append(run_id, event_(9), expected_sequence=3)
    assert await payload_numbers(ledger, run_id) == [0, 1, 2]
    assert (await ledger.verify(run_id)).intact


async def test_a_batch_with_one_stale_head_writes_every_run_in_order(
    ledger: SqlLedger, database: Database, tmp_path: Path
) -> None:
    """A batch of three cached runs, one of whose heads another writer moved: the batch
    writer does not write that run (SQLite rolls the batch back, PostgreSQL writes the two
    others); it is written from its re-read head, and a conditional append made on the stale
    belief is refused alone."""
    runs = [await new_run(ledger) for _ in range(3)]
    for run_id in runs:
        await ledger.append(run_id, event_(0))
    other = SqlLedger(database, LocalArtifactStore(tmp_path / "other"), group_commit=False)
    await other.append(runs[1], event_(1))  # runs[1]'s cached head is now stale
    futures = [
        await ledger.submit(runs[0], [event_(1)], expected_sequence=2),
        await ledger.submit(runs[1], [event_(2)]),
        await ledger.submit(runs[2], [event_(1)], expected_sequence=2),
        await ledger.submit(runs[1], [event_(9)], expected_sequence=3),  # stale belief
    ]
    await asyncio.wait(futures)
    assert [f.exception() is None for f in futures] == [True, True, True, False]
    assert isinstance(futures[3].exception(), SequenceConflictError)
    assert futures[1].result()[0].sequence == 3
    assert await payload_numbers(ledger, runs[0]) == [0, 1]
    assert await payload_numbers(ledger, runs[1]) == [0, 1, 2]
    assert await payload_numbers(ledger, runs[2]) == [0, 1]
    for run_id in runs:
        assert (await ledger.verify(run_id)).intact
    # after the refusal runs[1]'s head is read once more; then every head is cached again and
    # the next appends of all three go through the batch writer alone
    await ledger.append(runs[1], event_(4))
    watch = Statements(database)
    try:
        await asyncio.gather(*(ledger.append(r, event_(5)) for r in runs))
    finally:
        watch.close()
    assert watch.engine_sql == [] and 1 <= len(watch.batches) <= POSTGRES_LANES


async def test_write_behind_is_durable_at_the_marked_points(
    ledger: SqlLedger, database: Database, tmp_path: Path
) -> None:
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, ledger.artifacts, run_id, write_behind=True)  # type: ignore[arg-type]
    recorder.step_id = "act"
    for i in range(3):
        assert await recorder.record(E.MODEL_CALL, payload={"i": i}) is None
    assert recorder.last_sequence == 3
    reader = SqlEvidenceReader(database)
    seen_at_call: list[SideEffectStatus] = []

    async def provider(key: str, preq: str) -> dict[str, Any]:
        # the write-ahead rule: the intent (and all before it) is committed before this runs
        effects = await reader.records(SideEffectRecord, run_id)
        seen_at_call.extend(e.status for e in effects)
        committed = await database_events(database, run_id)
        assert committed == list(range(1, recorder.last_sequence + 1))
        return {"refund_id": "r-1"}

    final, receipt = await SideEffectLedger(recorder).execute(
        capability_id="payment.refund",
        step_id="act",
        action_hash=canonical_hash({"order": 1}),
        call=provider,
    )
    assert seen_at_call[-1] is SideEffectStatus.EXECUTING
    assert final.status is SideEffectStatus.CONFIRMED and receipt == {"refund_id": "r-1"}
    await recorder.record(E.MODEL_CALL, payload={"i": 99})
    await recorder.flush()
    assert await database_events(database, run_id) == list(range(1, recorder.last_sequence + 1))
    assert (await ledger.verify(run_id)).intact


async def database_events(database: Database, run_id: str) -> list[int]:
    e = schema.execution_events.c
    async with database.read() as conn:
        rows = await conn.execute(select(e.sequence).where(e.run_id == run_id).order_by(e.sequence))
        return [row.sequence for row in rows]


async def test_a_failed_batch_loses_only_the_unacknowledged_events(
    ledger: SqlLedger, database: Database
) -> None:
    run_id = await new_run(ledger)
    prompt = await prompt_of_another_run(ledger, "a")
    recorder = RunRecorder(ledger, ledger.artifacts, run_id, write_behind=True)  # type: ignore[arg-type]
    for i in range(4):
        await recorder.record(E.MODEL_CALL, payload={"i": i}, durable=i == 3)
    acknowledged = recorder.last_sequence
    # handed to the writer, never acknowledged: the prompt's id belongs to the other run, so
    # its transaction fails after the event rows were inserted, and rolls back whole; the
    # append before it is written on its own (a failing append never takes others down)
    await recorder.record(E.MODEL_CALL, payload={"i": 4})
    await recorder.record(E.PROMPT_COMPILED, record=prompt)
    with pytest.raises(ConflictError):
        await recorder.flush()
    assert await database_events(database, run_id) == list(range(1, acknowledged + 2))
    assert await payload_numbers(ledger, run_id) == [0, 1, 2, 3, 4]
    verified = await ledger.verify(run_id)
    assert verified.intact and verified.head_sequence == acknowledged + 1
    # the writer forgot the head it could not move: the next append starts from the truth
    assert (await ledger.append(run_id, event_(7))).sequence == acknowledged + 2


async def killed_after_acknowledgements(
    database: Database, run_id: str, artifacts: Path, *options: str
) -> None:
    """Run ``tests.stores.write_behind_child`` recording ``run_id`` until it has ``ACKED``
    events acknowledged and has handed on more (events, and artifacts with
    ``--with-artifacts``), some of them committed; then SIGKILL it."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.stores.write_behind_child",
        database.engine.url.render_as_string(hide_password=False),
        run_id,
        str(artifacts),
        *options,
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert child.stdout is not None
        first = (await asyncio.wait_for(child.stdout.readline(), 120)).split()
        assert first == [b"ACKED", str(ACKED).encode()]
        for _ in range(3):
            assert (await asyncio.wait_for(child.stdout.readline(), 120)).strip() == b"MORE"
    finally:
        child.send_signal(signal.SIGKILL)
        await asyncio.wait_for(child.wait(), 30)


async def test_a_killed_recorder_loses_only_unacknowledged_events(
    database: Database, tmp_path: Path
) -> None:
    run_id = f"wb-kill-{uuid.uuid4().hex[:8]}"
    await killed_after_acknowledgements(database, run_id, tmp_path / "a")
    ledger = SqlLedger(database)
    committed = await database_events(database, run_id)
    # every acknowledged event is there; whatever else is there is the prefix after it
    assert committed[:ACKED] == list(range(1, ACKED + 1))
    assert committed == list(range(1, len(committed) + 1))
    assert await payload_numbers(ledger, run_id) == list(range(len(committed)))
    verified = await ledger.verify(run_id)
    assert verified.intact and verified.head_sequence == len(committed)


async def test_a_killed_recorder_never_committed_an_event_before_its_artifact(
    database: Database, tmp_path: Path
) -> None:
    """Crash consistency of the artifact writes (started at once, on writer threads, and
    the appends behind them handed on together): after a SIGKILL, every committed event's
    artifact is there and intact."""
    run_id = f"wb-kill-art-{uuid.uuid4().hex[:8]}"
    await killed_after_acknowledgements(database, run_id, tmp_path / "a", "--with-artifacts")
    artifacts = LocalArtifactStore(tmp_path / "a")
    ledger = SqlLedger(database, artifacts)
    referenced = [
        json.loads(data or b"{}")
        for _, data in await ledger.events_with_payloads(run_id)
        if b"state_ref" in (data or b"")
    ]
    assert referenced  # the kill came after some of them were committed
    for payload in referenced:
        assert await artifacts.get(payload["state_ref"]) == canonicalize({"i": payload["i"]})
    assert (await ledger.verify(run_id)).intact


async def test_a_batch_of_cached_runs_is_one_round_trip(
    ledger: SqlLedger, database: Database
) -> None:
    """Item 1 of issue 21: a transaction is one call on SQLite's writer thread (BEGIN …
    COMMIT inside) or one statement on PostgreSQL; every head of it moves in one statement."""
    runs = [await new_run(ledger) for _ in range(5)]
    for run_id in runs:  # heads cached
        await ledger.append(run_id, event_(0))
    watch = Statements(database)
    try:
        futures = [await ledger.submit(r, [event_(1), event_(2)]) for r in runs]
        await asyncio.gather(*futures)
    finally:
        watch.close()
    assert watch.engine_sql == []  # nothing through the pool: no head read, no BEGIN
    lanes = POSTGRES_LANES if database.is_postgresql else 1
    assert 1 <= len(watch.batches) <= lanes
    for statements in watch.batches:
        assert sum(1 for s in statements if "UPDATE runs" in s) == 1
        if database.is_postgresql:
            assert len(statements) == 1 and statements[0].startswith("WITH moves")
        else:
            assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    assert watch.commits == len(watch.batches)
    for run_id in runs:
        assert (await ledger.verify(run_id)).head_sequence == 3


async def test_after_a_failed_hand_off_the_run_still_records_its_failure(
    ledger: SqlLedger, database: Database
) -> None:
    run_id = await new_run(ledger)
    prompt = await prompt_of_another_run(ledger, "b")
    recorder = RunRecorder(ledger, ledger.artifacts, run_id, write_behind=True)  # type: ignore[arg-type]
    await recorder.record(E.MODEL_CALL, payload={"i": 0}, durable=True)
    await recorder.record(E.PROMPT_COMPILED, record=prompt)  # refused in the background
    await recorder.record(E.MODEL_CALL, payload={"i": 1})  # names the sequence after it
    with pytest.raises(ConflictError):
        await recorder.flush()
    # the recorder goes on after what is committed: its failure event lands, in order
    await recorder.record(E.RUN_FAILED, payload={"i": 2}, durable=True)
    assert await payload_numbers(ledger, run_id) == [0, 2]
    assert (await ledger.verify(run_id)).intact


async def test_an_unknown_outcome_is_counted_once_it_is_committed_behind(ledger: SqlLedger) -> None:
    """Write-behind recording counts ``agent_unknown_side_effect_total`` as the direct path
    does: once, when the UNKNOWN transition is committed (a builtin TimeoutError after the
    provider was called leaves the outcome unknowable)."""
    from prometheus_client import REGISTRY

    def unknown_total() -> float:
        labels = {"capability": "payment.refund"}
        return REGISTRY.get_sample_value("agent_unknown_side_effect_total", labels) or 0.0

    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, ledger.artifacts, run_id, write_behind=True)  # type: ignore[arg-type]
    recorder.step_id = "act"
    before = unknown_total()

    async def provider(key: str, preq: str) -> dict[str, Any]:
        raise TimeoutError("the refund was sent; its answer was lost")

    final, _ = await SideEffectLedger(recorder).execute(
        capability_id="payment.refund",
        step_id="act",
        action_hash=canonical_hash({"order": 2}),
        call=provider,
    )
    await recorder.flush()
    assert final.status is SideEffectStatus.UNKNOWN
    assert unknown_total() == before + 1
    assert (await ledger.verify(run_id)).intact


async def side_effect_rows(database: Database, run_id: str) -> list[tuple[Any, ...]]:
    """The run's side-effect lookup rows, without what names the run (its id, the event ids)."""
    s = schema.side_effects.c
    async with database.read() as conn:
        rows = await conn.execute(
            select(s.step_id, s.sequence, s.status, s.record, s.content_hash)
            .where(s.run_id == run_id)
            .order_by(s.sequence)
        )
        out = []
        for step_id, sequence, status, record, content_hash in rows.all():
            effect = SideEffectRecord.model_validate(record)
            assert content_hash == effect.record_hash()
            out.append((step_id, sequence, status, effect.status, effect.provider_receipt))
        return out


def effect_of(run_id: str, status: SideEffectStatus, receipt: str | None = None) -> NewEvent:
    record = SideEffectRecord(
        side_effect_id=f"se-{run_id}",
        run_id=run_id,
        step_id="pay",
        capability_id="payment.refund",
        idempotency_key=f"idem-{run_id}",
        action_hash=canonical_hash({"refund": 10}),
        status=status,
        provider_receipt=receipt,
    )
    return NewEvent("pay", E.SIDE_EFFECT, T0, record=record)


async def test_side_effect_transitions_take_the_batch_writer_and_match_the_general_path(
    ledger: SqlLedger, database: Database
) -> None:
    """A side effect's status moves within a batch and across batches in one round trip of
    the batch writer, and its lookup row is the one the general path leaves: the last new
    content (a repeated one keeps the row of its first event; one changed back within a batch
    takes the later event's)."""
    S = SideEffectStatus
    script: list[list[tuple[SideEffectStatus, str | None]]] = [
        [(S.PLANNED, None), (S.EXECUTING, None)],  # one batch: inserted as EXECUTING
        [(S.FAILED, "rejected: no")],  # another: updated
        [(S.FAILED, "rejected: no")],  # the same content again: the row stays
        [(S.EXECUTING, "rejected: no"), (S.FAILED, "rejected: no")],  # changed back in a batch
        [(S.EXECUTING, "rejected: no"), (S.CONFIRMED, "r-1")],
    ]
    general = SqlLedger(database, ledger.artifacts, group_commit=False)
    fast_run, general_run = await new_run(ledger), await new_run(general)
    await ledger.append(fast_run, event_(0))  # its head cached
    await general.append(general_run, event_(0))
    watch = Statements(database)
    try:
        for batch in script:
            await ledger.append_many(fast_run, [effect_of(fast_run, *s) for s in batch])
            fast = await side_effect_rows(database, fast_run)
            await general.append_many(general_run, [effect_of(general_run, *s) for s in batch])
            assert fast == await side_effect_rows(database, general_run)
    finally:
        watch.close()
    assert len(watch.batches) == len(script)
    assert all(statements[-1] != "ROLLBACK" for statements in watch.batches)
    (row,) = fast
    assert row[1] == 9 and row[2] == "CONFIRMED"
    assert (await ledger.verify(fast_run)).intact


async def test_a_side_effect_of_another_run_is_refused_by_the_batch_writer(
    ledger: SqlLedger, database: Database
) -> None:
    run_id, other = await new_run(ledger), await new_run(ledger)
    await ledger.append(run_id, effect_of(run_id, SideEffectStatus.PLANNED))
    await ledger.append(other, event_(0))  # its head cached: the batch writer is tried first
    intruder = effect_of(run_id, SideEffectStatus.EXECUTING)
    with pytest.raises(ConflictError, match="already recorded for run"):
        await ledger.append(other, NewEvent("pay", E.SIDE_EFFECT, T0, record=intruder.record))
    assert await database_events(database, other) == [1]
    assert [r[2] for r in await side_effect_rows(database, run_id)] == ["PLANNED"]
