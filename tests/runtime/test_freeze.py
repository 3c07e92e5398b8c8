"""Freezing a recorded support-desk run's evidence for an incident, on the local store and on
SeaweedFS S3 with Object Lock (SQLite and PostgreSQL each): every referenced artifact is held
and retained, deletion is refused and the bytes stay readable, the freeze names the chain head,
and a run edited in SQL is refused."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import update

from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from forensics.freeze import collect_references, freeze_evidence, referenced_artifacts
from models import (
    ContextSnapshot,
    EvidenceFreezeRequest,
    EvidenceType,
    ExecutionEventType,
    PromptArtifact,
    ReplayCheckpoint,
    RetrievalFixture,
    RunRecord,
)
from models.canonical import canonicalize
from models.digest import sha256_digest
from models.errors import ChainBrokenError, EvidenceLockedError, InvalidInputError, RunNotFoundError
from models.freeze import FreezeRecord
from runtime.ports import ArtifactStore
from stores.artifacts import LocalArtifactStore, S3ArtifactStore
from stores.sql import schema
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.incidents import SqlIncidentStore
from stores.sql.ledger import CAS_PREFIX, NewEvent, SqlLedger
from stores.sql.support_desk_world import SqlWorldStore

E = ExecutionEventType
TYPES = (EvidenceType.EVENT, EvidenceType.PROMPT, EvidenceType.CONTEXT, EvidenceType.RETRIEVAL)


def freeze_request(run_id: str, days: int = 730) -> EvidenceFreezeRequest:
    until = (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0)
    return EvidenceFreezeRequest(
        run_id=run_id, incident_id=f"inc-{uuid.uuid4().hex[:8]}", types=TYPES, retention_until=until
    )


async def expected_references(ledger: SqlLedger, evidence: SqlEvidenceReader, run_id: str) -> set:
    """What the run's evidence points to, read independently of ``forensics.freeze``."""
    refs = {p.content_ref for p in await evidence.records(PromptArtifact, run_id)}
    for snapshot in await evidence.records(ContextSnapshot, run_id):
        refs.update(snapshot.message_refs)
    for retrieval in await evidence.records(RetrievalFixture, run_id):
        refs.update(item.chunk_hash for item in retrieval.evidence)
    refs.update(c.state_ref for c in await evidence.records(ReplayCheckpoint, run_id))
    refs.update(
        e.payload_ref.removeprefix(CAS_PREFIX)
        for e in await ledger.events(run_id)
        if e.payload_ref.startswith(CAS_PREFIX)
    )
    return refs


async def freeze_and_check(
    db: Database,
    ledger: SqlLedger,
    artifacts: ArtifactStore,
    world: SimulatedWorld,
    scenario: str,
) -> tuple[FreezeRecord, str]:
    """Record ``scenario``, freeze it, and check everything a freeze promises."""
    evidence = SqlEvidenceReader(db)
    run_id = (await run_scenario(world, ledger, artifacts, scenario)).run_id
    request = freeze_request(run_id)
    expected = await expected_references(ledger, evidence, run_id)
    assert expected, "the run references no artifacts"

    now = datetime.now(UTC)
    freeze_id = f"freeze-{uuid.uuid4().hex[:8]}"
    record = await freeze_evidence(
        ledger, evidence, artifacts, request, freeze_id=freeze_id, now=now
    )

    head = await ledger.verify(run_id)
    assert record.chain_head_hash == head.head_hash
    assert record.chain_head_sequence == head.event_count > 0
    assert (record.freeze_id, record.run_id, record.incident_id) == (
        freeze_id,
        run_id,
        request.incident_id,
    )
    assert record.types == request.types and record.retention_until == request.retention_until
    assert record.created_at == now and record.missing_digests == ()
    assert set(record.artifact_digests) == expected
    assert set(record.artifact_digests) == await referenced_artifacts(
        ledger, evidence, run_id, artifacts
    )
    for digest in record.artifact_digests:
        assert await artifacts.legal_hold(digest), digest
        assert await artifacts.retention(digest) == request.retention_until, digest
        with pytest.raises(EvidenceLockedError, match=f"refusing to delete artifact {digest}"):
            await artifacts.delete(digest)
        assert sha256_digest(await artifacts.get(digest)) == digest

    # a retried activity freezes the same set again, harmlessly, into the same record
    again = await freeze_evidence(
        ledger, evidence, artifacts, request, freeze_id=freeze_id, now=now
    )
    assert again == record
    assert (await ledger.verify(run_id)).intact

    store = SqlIncidentStore(db)
    assert await store.record_freeze(record) == record
    assert await store.record_freeze(again) == record
    assert await store.frozen_until(run_id) == request.retention_until
    return record, run_id


async def test_freeze_on_the_local_store(rec) -> None:
    record, run_id = await freeze_and_check(rec.db, rec.ledger, rec.artifacts, rec.world, "happy")
    assert record.enforced_by_backend is False
    frozen = set(record.artifact_digests)
    # every kind of reference the support desk records is there
    prompts = await rec.evidence.records(PromptArtifact, run_id)
    snapshots = await rec.evidence.records(ContextSnapshot, run_id)
    retrievals = await rec.evidence.records(RetrievalFixture, run_id)
    checkpoints = await rec.evidence.records(ReplayCheckpoint, run_id)
    chunks = {item.chunk_hash for r in retrievals for item in r.evidence}
    assert prompts and snapshots and chunks and checkpoints
    assert {p.content_ref for p in prompts} <= frozen
    assert {ref for s in snapshots for ref in s.message_refs} <= frozen
    assert chunks <= frozen
    assert {c.state_ref for c in checkpoints} <= frozen


async def test_freeze_on_s3_with_object_lock(
    database: Database, s3_artifact_store: S3ArtifactStore
) -> None:
    store = s3_artifact_store
    # a small inline limit sends the larger payloads to S3 as well
    ledger = SqlLedger(database, store, inline_limit=256)
    record, run_id = await freeze_and_check(
        database,
        ledger,
        store,
        SimulatedWorld(SqlWorldStore.beside(database.engine.url)),
        "wrong-customer",
    )
    assert record.enforced_by_backend is True
    cas = [e for e in await ledger.events(run_id) if e.payload_ref.startswith(CAS_PREFIX)]
    assert cas, "no payload went to the artifact store"
    assert {e.payload_hash for e in cas} <= set(record.artifact_digests)
    # the server itself refuses: every version is on legal hold and retained
    for digest in record.artifact_digests:
        key = store.key_for(digest)
        versions = store.client.list_object_versions(Bucket=store.bucket, Prefix=key)
        for version in versions["Versions"]:
            vid = version["VersionId"]
            hold = store.client.get_object_legal_hold(Bucket=store.bucket, Key=key, VersionId=vid)
            assert hold["LegalHold"]["Status"] == "ON"
            with pytest.raises(ClientError) as refused:
                store.client.delete_object(Bucket=store.bucket, Key=key, VersionId=vid)
            assert refused.value.response["Error"]["Code"] == "AccessDenied"
        assert sha256_digest(await store.get(digest)) == digest


async def test_a_run_edited_in_sql_is_not_frozen(rec) -> None:
    run_id = (await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer")).run_id
    ev = schema.execution_events
    async with rec.db.transaction() as conn:
        await conn.execute(
            update(ev).where(ev.c.run_id == run_id, ev.c.sequence == 3).values(step_id="forged")
        )
    with pytest.raises(ChainBrokenError, match="broken at sequence 3") as refused:
        await freeze_evidence(
            rec.ledger,
            rec.evidence,
            rec.artifacts,
            freeze_request(run_id),
            freeze_id="freeze-tampered",
            now=datetime.now(UTC),
        )
    assert refused.value.sequence == 3
    assert run_id in str(refused.value)
    # nothing was held: a freeze of tampered evidence never looks like a clean one
    for digest in await referenced_artifacts(rec.ledger, rec.evidence, run_id, rec.artifacts):
        assert not await rec.artifacts.legal_hold(digest)
        assert await rec.artifacts.retention(digest) is None


async def test_refs_in_steps_migrations_and_artifacts_are_frozen(rec) -> None:
    """References the support desk does not record live (replay's random state, state
    migrations, artifacts) are found too; values that are not digests are ignored, and digests
    that are not in the store are named: the run does not verify and is not frozen."""
    t0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await rec.ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=t0)
    )

    async def put(value: Any) -> str:
        return await rec.artifacts.put(canonicalize(value))

    random_state, raw, migrated, artifact = (
        await put({"rng": 1}),
        await put({"v": 1}),
        await put({"v": 2}),
        await put({"csv": "a,b"}),
    )
    absent = sha256_digest(b"never stored")
    events = [
        NewEvent(
            "s1",
            E.STEP_COMPLETED,
            t0,
            payload={
                "next": None,
                "output": {"x_ref": "not-a-digest"},
                "random_state_ref": random_state,
            },
        ),
        NewEvent(
            "s1",
            E.STATE_MIGRATION,
            t0,
            payload={"raw_state_ref": raw, "migrated_state_ref": migrated, "migration_version": 2},
        ),
        NewEvent(
            "s1",
            E.ARTIFACT,
            t0,
            payload={"artifact_id": "report", "version": 1, "content_hash": artifact},
        ),
        NewEvent("s1", E.STEP_COMPLETED, t0, payload={"next": None, "state_ref": absent}),
    ]
    await rec.ledger.append_many(run_id, events)

    found = await referenced_artifacts(rec.ledger, rec.evidence, run_id, rec.artifacts)
    assert found == {random_state, raw, migrated, artifact}
    assert await referenced_artifacts(rec.ledger, rec.evidence, run_id) == found  # ledger's store
    assert await collect_references(rec.ledger, rec.evidence, run_id) == found | {absent}
    # a chained reference to an artifact that is not stored is evidence that does not verify:
    # the freeze names it and holds nothing
    with pytest.raises(ChainBrokenError, match=f"sequence 4: artifact {absent} missing"):
        await freeze_evidence(
            rec.ledger,
            rec.evidence,
            rec.artifacts,
            freeze_request(run_id),
            freeze_id="freeze-refs",
            now=datetime.now(UTC),
        )
    for digest in found:
        assert not await rec.artifacts.legal_hold(digest)
    # once it is stored (restored from a backup, say) the run verifies and everything is held
    await rec.artifacts.put(b"never stored")
    record = await freeze_evidence(
        rec.ledger,
        rec.evidence,
        rec.artifacts,
        freeze_request(run_id),
        freeze_id="freeze-refs",
        now=datetime.now(UTC),
    )
    assert set(record.artifact_digests) == found | {absent} and record.missing_digests == ()
    assert record.chain_head_sequence == 4
    for digest in found | {absent}:
        assert await rec.artifacts.legal_hold(digest)


async def test_freeze_refuses_a_past_retention_and_an_unknown_run(rec) -> None:
    now = datetime.now(UTC)
    run_id = (await run_scenario(rec.world, rec.ledger, rec.artifacts, "happy")).run_id
    past = freeze_request(run_id).model_copy(update={"retention_until": now - timedelta(days=1)})
    with pytest.raises(InvalidInputError, match="is not after the freeze time"):
        await freeze_evidence(
            rec.ledger, rec.evidence, rec.artifacts, past, freeze_id="f-past", now=now
        )
    with pytest.raises(RunNotFoundError, match="no-such-run"):
        await freeze_evidence(
            rec.ledger,
            rec.evidence,
            rec.artifacts,
            freeze_request("no-such-run"),
            freeze_id="f-none",
            now=now,
        )
    assert isinstance(rec.artifacts, LocalArtifactStore)


async def test_a_lookup_row_edited_in_sql_cannot_hide_an_artifact(rec) -> None:
    """References are read from the chain-covered payloads too: a prompt row whose
    ``content_ref`` was rewritten in SQL (which the chain does not cover) still freezes the
    prompt the model really saw."""
    run_id = (await run_scenario(rec.world, rec.ledger, rec.artifacts, "happy")).run_id
    prompt = (await rec.evidence.records(PromptArtifact, run_id))[0]
    decoy = await rec.artifacts.put(b"a decoy prompt")
    table = schema.prompt_artifacts
    forged = {**prompt.model_dump(mode="json"), "content_ref": decoy}
    async with rec.db.transaction() as conn:
        await conn.execute(
            update(table).where(table.c.artifact_id == prompt.artifact_id).values(record=forged)
        )
    # the edited row no longer agrees with the chained event that recorded it: the freeze is
    # refused naming it (and nothing is held on the decoy's word)
    with pytest.raises(ChainBrokenError, match=f"prompt artifact {prompt.artifact_id} content_ref"):
        await freeze_evidence(
            rec.ledger,
            rec.evidence,
            rec.artifacts,
            freeze_request(run_id),
            freeze_id="freeze-row-edit",
            now=datetime.now(UTC),
        )
    assert not await rec.artifacts.legal_hold(decoy)
    # and the references are still read from the chain-covered payloads, not the edited row
    refs = await collect_references(rec.ledger, rec.evidence, run_id)
    assert prompt.content_ref in refs
