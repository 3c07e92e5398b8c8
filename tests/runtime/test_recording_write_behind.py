"""Write-behind recording of the evidence an event depends on (``runtime.write_behind``):
artifacts, sealed raw artifacts and subjects are written in the background, an event reaches
the ledger only once what it references is durable, a failed write fails the run at its next
durable point; the vault's cached data key and its batched raw artifacts, on both backends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue
from sqlalchemy import select

from models import ExecutionEvent, ExecutionEventType, RunRecord, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash, canonicalize
from models.errors import CanonicalizationError, StoreError
from models.redaction import REDACT_V1, redaction_policy
from runtime import write_behind
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql import schema
from stores.sql.batch_writer import batch_writer
from stores.sql.database import Database
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.linking import AppendRequest
from stores.sql.privacy import SqlRawVault, artifact_raw_id

T0 = datetime(2026, 12, 1, 20, 0, tzinfo=UTC)
E = ExecutionEventType
KEK = LocalKeyEncryptionKey(b"k" * 32)


class GatedArtifacts(LocalArtifactStore):
    """A local store whose puts wait until ``gate`` is set (or fail with ``failure``)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = asyncio.Event()
        #: set once a put waits at the gate (the loop has turned since it was started)
        self.entered = asyncio.Event()
        self.failure: Exception | None = None
        self.puts = 0

    async def put(self, data: bytes) -> str:
        self.puts += 1
        self.entered.set()
        await self.gate.wait()
        if self.failure is not None:
            raise self.failure
        return await super().put(data)


async def new_run(ledger: SqlLedger) -> str:
    run_id = f"wbe-{uuid.uuid4().hex[:12]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    )
    return run_id


async def vaulted_run(
    database: Database, tmp_path: Path
) -> tuple[LocalArtifactStore, SqlRawVault, SqlLedger, str]:
    """A new run on a ledger that keeps raw forms in a vault (sealed with ``KEK``), with its
    artifacts under ``tmp_path``: the store, the vault, the ledger and the run's id."""
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, KEK)
    ledger = SqlLedger(database, artifacts, vault=vault)
    return artifacts, vault, ledger, await new_run(ledger)


def redacting_recorder(
    ledger: SqlLedger, artifacts: LocalArtifactStore, run_id: str, policy: str = REDACT_V1
) -> RunRecorder:
    """A write-behind recorder of ``run_id`` that redacts with ``policy`` for customer C-1."""
    return RunRecorder(
        ledger,
        artifacts,
        run_id,
        redaction=redaction_policy(policy),
        subject_id="customer:C-1",
        write_behind=True,
    )


async def committed(database: Database, run_id: str) -> list[str]:
    e = schema.execution_events.c
    async with database.read() as conn:
        rows = await conn.execute(select(e.type).where(e.run_id == run_id).order_by(e.sequence))
        return [row.type for row in rows]


@pytest.fixture
def artifacts(tmp_path: Path) -> GatedArtifacts:
    return GatedArtifacts(tmp_path / "artifacts")


async def test_an_event_reaches_the_ledger_only_once_its_artifact_is_durable(
    database: Database, artifacts: GatedArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    # appends ready to go are handed on at once, not after waiting for the writes behind them
    # (that wait has tests of its own, below)
    monkeypatch.setattr(write_behind, "PUMP_GATHER_SECONDS", 0)
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    await recorder.record(E.STEP_STARTED, payload={"step": "a"})
    state = {"count": 1}
    # the digest is known at once; the put is held back by the gate
    ref = await recorder.store_json(state)
    assert ref == canonical_hash(state)
    await recorder.record(E.STEP_COMPLETED, payload={"state_ref": ref})
    await recorder.record(E.STEP_STARTED, payload={"step": "b"})
    # the appends are handed on when the loop turns (the put has reached the gate by then):
    # the first, which references nothing, and none of those behind the held-back put
    await artifacts.entered.wait()
    await ledger.flush()  # everything the writer was handed is committed
    assert await committed(database, run_id) == [str(E.STEP_STARTED)]
    assert not await LocalArtifactStore(artifacts.root).exists(ref)

    artifacts.gate.set()
    await recorder.flush()
    assert await committed(database, run_id) == [
        str(E.STEP_STARTED),
        str(E.STEP_COMPLETED),
        str(E.STEP_STARTED),
    ]
    assert await artifacts.get(ref) == canonicalize(state)
    assert (await ledger.verify(run_id)).intact


async def test_the_same_bytes_are_put_once_per_recorder(
    database: Database, artifacts: GatedArtifacts
) -> None:
    ledger = SqlLedger(database, artifacts)
    recorder = RunRecorder(ledger, artifacts, await new_run(ledger), write_behind=True)
    artifacts.gate.set()
    refs = {await recorder.store_json({"system": "the same prompt"}) for _ in range(5)}
    await recorder.flush()
    assert len(refs) == 1 and artifacts.puts == 1


async def test_a_failed_artifact_write_fails_the_run_at_its_next_durable_point(
    database: Database, artifacts: GatedArtifacts
) -> None:
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    await recorder.record(E.STEP_STARTED, payload={"step": "a"}, durable=True)
    artifacts.failure = StoreError("the artifact store is gone")
    ref = await recorder.store_json({"count": 2})
    await recorder.record(E.CHECKPOINT, payload={"state_ref": ref})
    await recorder.record(E.STEP_COMPLETED, payload={"next": None})
    artifacts.gate.set()
    with pytest.raises(StoreError, match="the artifact store is gone"):
        await recorder.flush()
    # nothing that depended on the lost artifact (nor anything after it) was committed, and
    # the run's failure lands right after what was
    assert recorder.last_sequence == 1
    await recorder.record(E.RUN_FAILED, payload={"error": "StoreError"}, durable=True)
    assert await committed(database, run_id) == [str(E.STEP_STARTED), str(E.RUN_FAILED)]
    assert (await ledger.verify(run_id)).intact


async def test_events_are_handed_on_when_the_loop_turns_and_durable_at_the_next_durable_point(
    database: Database, artifacts: GatedArtifacts
) -> None:
    """``record`` returns before the ledger's writer is handed anything (its payload's
    canonical form and hash are made by the hand-off's pump, while the step waits); the next
    durable point commits every event recorded before it, in order, on an intact chain."""
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    submitted: list[int] = []
    prepare, enqueue = ledger.prepare_append, ledger.enqueue_append

    async def counted(*args: Any, **kwargs: Any) -> AppendRequest:
        submitted.append(len(args[1]))
        return await prepare(*args, **kwargs)

    enqueued: list[AppendRequest] = []

    async def noted(request: AppendRequest) -> asyncio.Future[list[ExecutionEvent]]:
        enqueued.append(request)
        return await enqueue(request)

    ledger.prepare_append = counted  # type: ignore[method-assign]
    ledger.enqueue_append = noted  # type: ignore[method-assign]
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    for i in range(3):
        await recorder.record(E.MODEL_CALL, payload={"i": i})
    # no loop turn yet: nothing prepared, the writer handed nothing
    assert submitted == [] and enqueued == []
    await recorder.record(E.SIDE_EFFECT, payload={"status": "EXECUTING"}, durable=True)
    # read back on a connection of its own, as after a crash right here
    assert await committed(database, run_id) == [str(E.MODEL_CALL)] * 3 + [str(E.SIDE_EFFECT)]
    assert sum(submitted) == 4
    assert [len(r.events) for r in enqueued] == submitted  # each prepared once, handed on
    assert (await ledger.verify(run_id)).intact


async def test_a_payload_the_ledger_refuses_fails_the_run_at_its_next_durable_point(
    database: Database, artifacts: GatedArtifacts
) -> None:
    """A payload refused when it is handed on (no canonical form) fails the durable point
    after it, as a failed commit does; nothing from it on is committed, and the run's
    failure lands right after what was."""
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    await recorder.record(E.STEP_STARTED, payload={"step": "a"}, durable=True)
    await recorder.record(E.MODEL_CALL, payload={"score": float("nan")})
    await recorder.record(E.STEP_COMPLETED, payload={"next": None})
    with pytest.raises(CanonicalizationError):
        await recorder.record(E.SIDE_EFFECT, payload={"status": "EXECUTING"}, durable=True)
    assert recorder.last_sequence == 1
    await recorder.record(E.RUN_FAILED, payload={"error": "CanonicalizationError"}, durable=True)
    assert await committed(database, run_id) == [str(E.STEP_STARTED), str(E.RUN_FAILED)]
    assert (await ledger.verify(run_id)).intact


async def test_a_write_is_durable_with_its_intent_and_its_outcome_at_the_next_durable_point(
    database: Database, artifacts: GatedArtifacts
) -> None:
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    artifacts.gate.set()
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    recorder.step_id = "act"
    # an artifact the intent is recorded after: durable before the provider is called too
    ref = await recorder.store_json({"draft": "hello"})
    seen: list[list[str]] = []

    async def provider(key: str, preq: str) -> dict[str, str]:
        seen.append(await committed(database, run_id))
        assert await LocalArtifactStore(artifacts.root).exists(ref)
        return {"receipt": "r-1"}

    final, _ = await SideEffectLedger(recorder).execute(
        capability_id="email.send",
        step_id="act",
        action_hash=canonical_hash({"to": "someone"}),
        call=provider,
    )
    assert seen == [[str(E.SIDE_EFFECT), str(E.SIDE_EFFECT)]]  # PLANNED and EXECUTING
    assert final.status is SideEffectStatus.CONFIRMED
    await recorder.record(E.RUN_COMPLETED, payload={"outcome": None}, durable=True)
    assert await committed(database, run_id) == [str(E.SIDE_EFFECT)] * 3 + [str(E.RUN_COMPLETED)]
    statuses = [
        SideEffectRecord.model_validate_json(data or b"{}").status
        for event, data in await ledger.events_with_payloads(run_id)
        if event.type is E.SIDE_EFFECT
    ]
    assert statuses == [
        SideEffectStatus.PLANNED,
        SideEffectStatus.EXECUTING,
        SideEffectStatus.CONFIRMED,
    ]


async def test_appends_deferred_behind_a_write_reach_the_ledger_in_one_transaction(
    database: Database, artifacts: GatedArtifacts
) -> None:
    """The appends waiting for an artifact are handed to the ledger together once it is
    durable: the writer commits them in one transaction, not the first alone and the rest
    in the next (the write-ahead point of a side effect waits for that commit)."""
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    await recorder.record(E.STEP_STARTED, payload={"step": "a"}, durable=True)  # head cached
    ref = await recorder.store_json({"count": 1})
    for i in range(4):
        await recorder.record(E.MODEL_CALL, payload={"state_ref": ref, "i": i})
    transactions: list[int] = []
    writer = batch_writer(database)

    def observe(statements: Sequence[str], committed_: bool) -> None:
        transactions.append(committed_)

    writer.observers.append(observe)
    try:
        artifacts.gate.set()
        await recorder.flush()
    finally:
        writer.observers.remove(observe)
    assert transactions == [True]
    assert await committed(database, run_id) == [str(E.STEP_STARTED)] + [str(E.MODEL_CALL)] * 4
    assert (await ledger.verify(run_id)).intact


async def test_an_append_ready_to_go_waits_for_the_write_behind_it_to_share_its_commit(
    database: Database, artifacts: GatedArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first append references nothing new, the second an artifact being put: the first
    waits for that put (within ``PUMP_GATHER_SECONDS``) and both go in one transaction, where
    handing the first on alone made the second wait for a commit of its own."""
    monkeypatch.setattr(write_behind, "PUMP_GATHER_SECONDS", 600)  # however slow the machine
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    artifacts.gate.set()
    await recorder.record(E.STEP_STARTED, payload={"step": "a"}, durable=True)  # head cached
    artifacts.gate.clear()
    await recorder.record(E.STEP_STARTED, payload={"step": "b"})  # ready to go
    ref = await recorder.store_json({"count": 2})
    await recorder.record(E.STEP_COMPLETED, payload={"state_ref": ref})  # behind the put
    transactions: list[bool] = []
    batch_writer(database).observers.append(lambda _, ok: transactions.append(ok))
    await artifacts.entered.wait()  # the pump has run: the first waits with the second
    await ledger.flush()
    assert transactions == []
    artifacts.gate.set()
    await recorder.flush()
    assert transactions == [True]
    assert await committed(database, run_id) == [str(E.STEP_STARTED)] * 2 + [str(E.STEP_COMPLETED)]


async def test_a_slow_write_does_not_hold_back_the_appends_before_it(
    database: Database, artifacts: GatedArtifacts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``PUMP_GATHER_SECONDS`` the appends ready to go are handed on without those
    behind a write still under way (a store outage does not hold back their commits)."""
    monkeypatch.setattr(write_behind, "PUMP_GATHER_SECONDS", 0.01)
    ledger = SqlLedger(database, artifacts)
    run_id = await new_run(ledger)
    recorder = RunRecorder(ledger, artifacts, run_id, write_behind=True)
    artifacts.gate.set()
    await recorder.record(E.STEP_STARTED, payload={"step": "a"}, durable=True)
    artifacts.gate.clear()
    committed_once = asyncio.Event()
    batch_writer(database).observers.append(lambda _, ok: committed_once.set())
    await recorder.record(E.STEP_STARTED, payload={"step": "b"})
    ref = await recorder.store_json({"count": 3})
    await recorder.record(E.STEP_COMPLETED, payload={"state_ref": ref})
    await asyncio.wait_for(committed_once.wait(), timeout=60)  # the put is still held
    assert await committed(database, run_id) == [str(E.STEP_STARTED)] * 2
    artifacts.gate.set()
    await recorder.flush()
    assert await committed(database, run_id) == [str(E.STEP_STARTED)] * 2 + [str(E.STEP_COMPLETED)]


async def test_sanitized_artifacts_keep_their_raw_form_in_one_vault_write(
    database: Database, tmp_path: Path
) -> None:
    artifacts, _, ledger, run_id = await vaulted_run(database, tmp_path)
    recorder = redacting_recorder(ledger, artifacts, run_id)
    messages = [{"content": f"write to ada{i}@example.com"} for i in range(3)]
    refs = [await recorder.store_json(m) for m in messages]
    refs.append(await recorder.store_json(messages[0]))  # the same message again
    await recorder.flush()
    r = schema.raw_payloads.c
    async with database.read() as conn:
        rows = (await conn.execute(select(r.raw_id, r.raw_hash).where(r.run_id == run_id))).all()
    assert sorted(row.raw_id for row in rows) == sorted(
        artifact_raw_id(run_id, ref) for ref in set(refs)
    )
    # the sanitized artifact is what was stored; the raw one opens from the vault
    assert b"ada0@example.com" not in await artifacts.get(refs[0])
    assert {row.raw_hash for row in rows} == {canonical_hash(m) for m in messages}


async def test_a_shredded_data_key_is_not_sealed_with_again(
    database: Database, tmp_path: Path
) -> None:
    vault = SqlRawVault(database, LocalArtifactStore(tmp_path / "a"), KEK)
    subject = f"customer:{uuid.uuid4().hex[:8]}"
    first = await vault.seal_raw(
        "run-1", b"raw", "sha256:" + "1" * 64, "sha256:" + "2" * 64, subject
    )
    again = await vault.seal_raw(
        "run-1", b"raw", "sha256:" + "1" * 64, "sha256:" + "2" * 64, subject
    )
    assert again["key_id"] == first["key_id"]  # the active key, sealed with again
    await vault.shred_subject(["run-1"], subject, "req-1")
    after = await vault.seal_raw(
        "run-2", b"raw", "sha256:" + "3" * 64, "sha256:" + "4" * 64, subject
    )
    assert after["key_id"] != first["key_id"]


async def test_raw_artifacts_are_kept_in_the_transaction_of_the_append_after_them(
    database: Database, tmp_path: Path
) -> None:
    """The raw forms of a model call's sanitized messages go with the next append (the event
    that references them), in its transaction: no vault transaction of their own; a raw form
    kept already (by another process) is left as it is."""
    from sqlalchemy import event

    artifacts, vault, ledger, run_id = await vaulted_run(database, tmp_path)
    await ledger.append(run_id, NewEvent("s", E.MODEL_CALL, T0, payload={"i": 0}))
    recorder = redacting_recorder(ledger, artifacts, run_id)
    recorder.last_sequence = 1
    messages = [{"content": f"write to ada{i}@example.com"} for i in range(3)]
    kept_ref = canonical_hash(recorder.hashing_view(messages[0]))
    await vault.record_artifact_raws(
        run_id, [(canonicalize(messages[0]), kept_ref)], REDACT_V1, "customer:C-1"
    )
    statements: list[str] = []

    def seen(_c: object, _cu: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(database.engine.sync_engine, "before_cursor_execute", seen)
    try:
        refs = [await recorder.store_json(m) for m in [*messages, messages[1]]]
        await recorder.record(E.CONTEXT_SNAPSHOT, payload={"messages": list[JsonValue](refs)})
        await recorder.flush()
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", seen)
    assert refs[0] == kept_ref
    r = schema.raw_payloads.c
    async with database.read() as conn:
        rows = (
            await conn.execute(
                select(r.raw_id, r.raw_hash, r.sequence).where(
                    r.run_id == run_id, r.raw_id.like("artifact:%")
                )
            )
        ).all()
    assert sorted(row.raw_id for row in rows) == sorted(
        artifact_raw_id(run_id, ref) for ref in set(refs)
    )
    assert {row.raw_hash for row in rows} == {canonical_hash(m) for m in messages}
    assert {row.sequence for row in rows} == {None}
    assert await committed(database, run_id) == ["MODEL_CALL", "CONTEXT_SNAPSHOT"]
    # the batch writer refused the kept row; the general path wrote the others beside it
    assert any("raw_payloads" in s and s.lstrip().upper().startswith("INSERT") for s in statements)
    # nothing kept already: the batch writer alone (nothing through the pool)
    statements.clear()
    event.listen(database.engine.sync_engine, "before_cursor_execute", seen)
    try:
        more = [await recorder.store_json({"content": f"call +1 555 010 00{i}"}) for i in (1, 2)]
        await recorder.record(E.CONTEXT_SNAPSHOT, payload={"messages": list[JsonValue](more)})
        await recorder.flush()
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", seen)
    assert not [s for s in statements if "raw_payloads" in s]
    async with database.read() as conn:
        kept = (await conn.execute(select(r.raw_id).where(r.run_id == run_id))).scalars().all()
    assert {artifact_raw_id(run_id, ref) for ref in more} <= set(kept)
    assert (await ledger.verify(run_id)).intact


async def test_people_learned_become_subjects_in_the_transaction_of_the_append_after_them(
    database: Database, tmp_path: Path
) -> None:
    """``learn_people`` (write-behind): the run's new subjects go with the next append, in its
    transaction, registered in the governance log by the batch writer (one transaction, not the
    general path's statements through the pool); a subject the run has already keeps its row
    and gets no second entry; people learned with no append after them are kept at the durable
    point."""
    from sqlalchemy import event

    from models import SideEffectClass
    from models.capability import Capability, PersonRecords
    from models.governance import GovernanceKind
    from models.privacy import RunSubject, SubjectKind
    from stores.sql.governance import SqlGovernanceLog

    artifacts, vault, ledger, run_id = await vaulted_run(database, tmp_path)
    await ledger.append(run_id, NewEvent("s", E.MODEL_CALL, T0, payload={"i": 0}))
    declared = RunSubject(subject_id="customer:C-1", kind=SubjectKind.END_USER, source="input")
    await vault.add_subjects(run_id, [declared])  # the run's end user: primary
    crm = Capability(
        capability_id="crm.lookup",
        side_effect_class=SideEffectClass.READ,
        person_records=PersonRecords(id_field="customer_id", subject_prefix="customer"),
    )
    recorder = redacting_recorder(ledger, artifacts, run_id, "redact-v2")
    recorder.last_sequence = 1
    statements: list[str] = []

    def seen(_c: object, _cu: object, statement: str, *_: object) -> None:
        statements.append(statement)

    batched: list[str] = []

    def observe(sent: Sequence[str], committed: bool) -> None:
        batched.extend(sent if committed else [])

    people = [{"customer_id": "C-1", "name": "Ada Lovelace"}, {"customer_id": "C-2", "name": "Bo"}]
    writer = batch_writer(database)
    writer.observers.append(observe)
    event.listen(database.engine.sync_engine, "before_cursor_execute", seen)
    try:
        await recorder.learn_people(crm, people)
        await recorder.record(E.TOOL_CALL, payload={"found": "Ada Lovelace and Bo"})
        await recorder.flush()
    finally:
        event.remove(database.engine.sync_engine, "before_cursor_execute", seen)
        writer.observers.remove(observe)
    # the subject rows are registered in the governance log as they are written, in the batch
    # writer's committed transaction (nothing written through the pool)
    assert not [s for s in statements if "governance_log" in s or "run_subjects" in s]
    assert [s for s in batched if "governance_log" in s and "INSERT" in s.upper()]
    entries = await SqlGovernanceLog(database).entries(run_id)
    assert [(e.kind, e.subject_id) for e in entries] == [
        (GovernanceKind.SUBJECT_REGISTERED, "customer:C-1"),
        (GovernanceKind.SUBJECT_REGISTERED, "customer:C-2"),
    ]
    assert await vault.subjects(run_id) == [
        {"subject_id": "customer:C-1", "kind": "END_USER", "source": "input", "primary": True},
        {
            "subject_id": "customer:C-2",
            "kind": "PERSON",
            "source": "provider:crm.lookup",
            "primary": False,
        },
    ]
    await recorder.learn_people(crm, [{"customer_id": "C-3", "name": "Cy"}])
    await recorder.flush()  # no append after it: kept at the durable point
    assert "customer:C-3" in {s["subject_id"] for s in await vault.subjects(run_id)}
    assert await committed(database, run_id) == ["MODEL_CALL", "TOOL_CALL"]
    assert (await ledger.verify(run_id)).intact
