"""The tamper suite: an attacker with write access to the database and the artifact directory
(not to the anchor log's Object Lock). Every scenario runs on SQLite and on PostgreSQL, must
be detected by ``verify`` and must name the place."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from models.anchor import AUDIT_LOG_ID
from models.chain import GENESIS_HASH, BreakReason, ChainRow, row_hash
from models.digest import sha256_digest
from models.errors import ChainBrokenError
from runtime.verification import require_verified
from stores.sql import schema
from stores.sql.database import utc
from tests.tamper.conftest import Recorded

EVENTS = "execution_events"


async def broken(rec: Recorded, run_id: str | None = None) -> str:
    """The verification's summary; asserts it is broken and that a consumer refuses it."""
    result = await rec.ledger.verify(run_id or rec.run_id)
    assert not result.intact, "tampering went undetected"
    assert result.problems, "no problem named"
    report = result.report()
    assert set(report) >= {"run_id", "intact", "events", "head", "checked", "problems"}
    assert set(report["checked"]) >= {"events", "payloads", "artifacts", "projections", "anchors"}
    try:
        await require_verified(rec.ledger, run_id or rec.run_id, to="act")
    except ChainBrokenError as exc:
        assert "does not verify" in str(exc)
    else:  # pragma: no cover - the assertion above already failed
        raise AssertionError("a consumer acted on evidence that does not verify")
    return result.summary()


# event rows -----------------------------------------------------------------------------------


async def test_edit_an_event_row(recorded: Recorded) -> None:
    await recorded.sql(
        f"UPDATE {EVENTS} SET step_id='other' WHERE run_id=:r AND sequence=4", r=recorded.run_id
    )
    assert (await broken(recorded)).startswith(f"broken at sequence 4: {BreakReason.HASH_MISMATCH}")


async def test_delete_an_event_row(recorded: Recorded) -> None:
    await recorded.sql(f"DELETE FROM {EVENTS} WHERE run_id=:r AND sequence=3", r=recorded.run_id)
    assert (await broken(recorded)).startswith(f"broken at sequence 3: {BreakReason.GAP}")


async def test_insert_an_event_row(recorded: Recorded) -> None:
    await recorded.sql(
        f"INSERT INTO {EVENTS} (run_id, sequence, event_id, step_id, type, payload_ref, "
        "payload_hash, previous_hash, hash, logical_time, recorded_at, schema_version, payload) "
        f"SELECT run_id, sequence + 100, 'forged', step_id, type, payload_ref, payload_hash, "
        f"previous_hash, hash, logical_time, recorded_at, schema_version, payload FROM {EVENTS} "
        "WHERE run_id=:r AND sequence=2",
        r=recorded.run_id,
    )
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {recorded.events + 1}:"), summary


async def test_reorder_event_rows(recorded: Recorded) -> None:
    r = recorded.run_id
    await recorded.sql(f"UPDATE {EVENTS} SET sequence=-4 WHERE run_id=:r AND sequence=4", r=r)
    await recorded.sql(f"UPDATE {EVENTS} SET sequence=4 WHERE run_id=:r AND sequence=5", r=r)
    await recorded.sql(f"UPDATE {EVENTS} SET sequence=5 WHERE run_id=:r AND sequence=-4", r=r)
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 4:"), summary


async def test_edit_payload_hash(recorded: Recorded) -> None:
    await recorded.sql(
        f"UPDATE {EVENTS} SET payload_hash=:h WHERE run_id=:r AND sequence=2",
        h="sha256:" + "0" * 64,
        r=recorded.run_id,
    )
    assert (await broken(recorded)).startswith("broken at sequence 2:")


async def test_edit_previous_hash(recorded: Recorded) -> None:
    await recorded.sql(
        f"UPDATE {EVENTS} SET previous_hash=:h WHERE run_id=:r AND sequence=5",
        h="sha256:" + "1" * 64,
        r=recorded.run_id,
    )
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 5: {BreakReason.PREVIOUS_HASH_MISMATCH}")


async def test_edit_hash(recorded: Recorded) -> None:
    await recorded.sql(
        f"UPDATE {EVENTS} SET hash=:h WHERE run_id=:r AND sequence=6",
        h="sha256:" + "2" * 64,
        r=recorded.run_id,
    )
    assert (await broken(recorded)).startswith("broken at sequence 6:")


async def test_edit_logical_time(recorded: Recorded) -> None:
    events = await recorded.ledger.events(recorded.run_id)
    await recorded.sql(
        f"UPDATE {EVENTS} SET logical_time=:t WHERE run_id=:r AND sequence=3",
        t=events[2].logical_time + timedelta(hours=1),
        r=recorded.run_id,
    )
    assert (await broken(recorded)).startswith(f"broken at sequence 3: {BreakReason.HASH_MISMATCH}")


# artifacts ------------------------------------------------------------------------------------


def _overwrite(rec: Recorded, digest: str, data: bytes | None) -> None:
    path = rec.artifact_path(digest)
    os.chmod(path, 0o644)
    if data is None:
        path.unlink()
    else:
        path.write_bytes(data)


async def test_edit_an_artifact_stored_payload(recorded: Recorded) -> None:
    data = recorded.artifact_path(recorded.big_payload).read_bytes()
    _overwrite(recorded, recorded.big_payload, data.replace(b"xxxx", b"yyyy", 1))
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 3: artifact {recorded.big_payload} corrupted")


async def test_delete_an_artifact_stored_payload(recorded: Recorded) -> None:
    _overwrite(recorded, recorded.big_payload, None)
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 3: artifact {recorded.big_payload} missing")


async def test_truncate_an_artifact_stored_payload(recorded: Recorded) -> None:
    data = recorded.artifact_path(recorded.big_payload).read_bytes()
    _overwrite(recorded, recorded.big_payload, data[: len(data) // 2])
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 3: artifact {recorded.big_payload} corrupted")


async def test_delete_a_referenced_artifact(recorded: Recorded) -> None:
    _overwrite(recorded, recorded.state_ref, None)
    summary = await broken(recorded)
    assert summary == f"broken at sequence 8: artifact {recorded.state_ref} missing"


# lookup tables --------------------------------------------------------------------------------


async def _set_record_field(rec: Recorded, table: str, key: str, value: str, field: str) -> None:
    """Edit one field of a lookup row's JSON record, as ``json_set`` / ``jsonb_set`` would."""
    t = getattr(schema, table)
    key_col = next(iter(t.primary_key.columns))
    async with rec.database.read() as conn:
        row = (await conn.execute(select(t.c.record).where(key_col == value))).one()
    record = dict(row.record) | {field: key}
    async with rec.database.transaction() as conn:
        await conn.execute(t.update().where(key_col == value).values(record=record))


async def test_edit_a_side_effect_status(recorded: Recorded) -> None:
    se = recorded.side_effect_id
    await recorded.sql("UPDATE side_effects SET status='FAILED' WHERE side_effect_id=:k", k=se)
    await _set_record_field(recorded, "side_effects", "FAILED", se, "status")
    summary = await broken(recorded)
    assert summary == (
        f"broken at sequence 7: side effect {se} status FAILED disagrees with the chained "
        "event (UNKNOWN)"
    )


async def test_edit_an_approval_action_hash(recorded: Recorded) -> None:
    forged = sha256_digest(b"another action")
    await recorded.sql(
        "UPDATE approvals SET action_hash=:h WHERE approval_id=:k", h=forged, k=recorded.approval_id
    )
    await _set_record_field(recorded, "approvals", forged, recorded.approval_id, "action_hash")
    summary = await broken(recorded)
    assert summary.startswith(
        f"broken at sequence 5: approval {recorded.approval_id} action_hash {forged} disagrees"
    )


async def test_edit_an_approval_expiry(recorded: Recorded) -> None:
    await _set_record_field(
        recorded, "approvals", "2099-01-01T00:00:00Z", recorded.approval_id, "expires_at"
    )
    summary = await broken(recorded)
    assert summary.startswith(
        f"broken at sequence 5: approval {recorded.approval_id} expires_at 2099-01-01T00:00:00Z "
        "disagrees with the chained event"
    )


async def test_edit_a_policy_decision(recorded: Recorded) -> None:
    await recorded.sql(
        "UPDATE policy_decisions SET decision='ALLOW' WHERE run_id=:r", r=recorded.run_id
    )
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 4: policy decision ")
    assert "decision ALLOW disagrees with the chained event (REQUIRE_APPROVAL)" in summary


async def test_move_a_lookup_row_to_another_sequence(recorded: Recorded) -> None:
    await recorded.sql(
        "UPDATE policy_decisions SET sequence = sequence + 1 WHERE run_id=:r", r=recorded.run_id
    )
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 4: policy decision ")
    assert "is recorded at sequence 5 but the chained event that recorded it is at sequence 4" in (
        summary
    )


async def test_replace_a_lookup_record_by_an_array(recorded: Recorded) -> None:
    # the same content in another JSON shape: an array of the record's values
    await recorded.sql(
        "UPDATE approvals SET record = :v WHERE approval_id=:k", v="[1]", k=recorded.approval_id
    )
    summary = await broken(recorded)
    assert summary == (
        f"broken at sequence 5: approval {recorded.approval_id} record is not a JSON object"
    )


async def test_edit_a_checkpoint(recorded: Recorded) -> None:
    async with recorded.database.read() as conn:
        key = (await conn.execute(select(schema.checkpoints.c.checkpoint_id))).scalars().all()
    other = sha256_digest(b"another state")
    for k in key:
        await _set_record_field(recorded, "checkpoints", other, k, "state_ref")
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 8: checkpoint ")
    assert f"state_ref {other} disagrees with the chained event" in summary


async def test_edit_a_fixture_response(recorded: Recorded) -> None:
    async with recorded.database.read() as conn:
        (key,) = (
            (
                await conn.execute(
                    select(schema.tool_fixtures.c.fixture_id).where(
                        schema.tool_fixtures.c.run_id == recorded.run_id
                    )
                )
            )
            .scalars()
            .all()
        )
    t = schema.tool_fixtures
    async with recorded.database.read() as conn:
        (record,) = (await conn.execute(select(t.c.record).where(t.c.fixture_id == key))).one()
    forged = dict(record) | {"sanitized_response": {"rows": []}}
    async with recorded.database.transaction() as conn:
        await conn.execute(t.update().where(t.c.fixture_id == key).values(record=forged))
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 3: fixture {key} sanitized_response")


async def test_delete_a_lookup_row(recorded: Recorded) -> None:
    await recorded.sql(
        "DELETE FROM side_effects WHERE side_effect_id=:k", k=recorded.side_effect_id
    )
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence 7: side effect {recorded.side_effect_id}")
    assert "is missing from side_effects" in summary


async def test_edit_a_lookup_row_content_hash(recorded: Recorded) -> None:
    forged = sha256_digest(b"another record")
    await recorded.sql(
        "UPDATE policy_decisions SET content_hash=:h WHERE run_id=:r", h=forged, r=recorded.run_id
    )
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 4: policy decision ")
    assert f"content hash {forged} disagrees with the chained event" in summary


async def test_rename_a_lookup_row(recorded: Recorded) -> None:
    # the row stays, under a key no chained event recorded: missing under its own, an orphan
    # under the other
    await recorded.sql(
        "UPDATE approvals SET approval_id='forged-approval' WHERE approval_id=:k",
        k=recorded.approval_id,
    )
    await broken(recorded)
    result = await recorded.ledger.verify(recorded.run_id)
    messages = [p.message for p in result.problems]
    missing = f"approval {recorded.approval_id} recorded by the chained event at sequence 5"
    assert f"{missing} is missing from approvals" in messages
    orphan = "approval forged-approval in approvals is not recorded by any chained event"
    assert orphan in messages


# anchors --------------------------------------------------------------------------------------


async def test_cut_the_tail_and_rewrite_the_head(recorded: Recorded) -> None:
    r, n = recorded.run_id, recorded.events
    await recorded.sql(f"DELETE FROM {EVENTS} WHERE run_id=:r AND sequence>:n", r=r, n=n - 3)
    await recorded.sql("DELETE FROM checkpoints WHERE run_id=:r", r=r)
    events = await recorded.ledger.events(r)
    await recorded.sql(
        "UPDATE runs SET head_sequence=:s, head_hash=:h WHERE run_id=:r",
        s=len(events),
        h=events[-1].hash,
        r=r,
    )
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {n}: anchor at sequence {n} says head sha256:")
    assert f"ledger has {n - 3} events" in summary


async def test_rechain_a_whole_run(recorded: Recorded) -> None:
    """Every event re-hashed after the side effect's UNKNOWN became FAILED in its payload too,
    the head and the lookup row moved along: only the anchor still knows."""
    await rechain(recorded)
    chain_only = await recorded.ledger.verify(recorded.run_id, full=False)
    assert chain_only.intact, "the re-chained run is a valid chain"
    summary = await broken(recorded)
    assert summary.startswith(
        f"broken at sequence {recorded.events}: anchor at sequence {recorded.events} says head"
    ), summary


async def rechain(recorded: Recorded) -> str:
    """Re-chain the run consistently (the side effect's UNKNOWN made FAILED in its payload,
    lookup row and record, every hash and the head moved along); the new head."""
    r = recorded.run_id
    async with recorded.database.read() as conn:
        rows = (
            await conn.execute(
                select(schema.execution_events)
                .where(schema.execution_events.c.run_id == r)
                .order_by(schema.execution_events.c.sequence)
            )
        ).all()
    previous = GENESIS_HASH
    for row in rows:
        payload = row.payload
        if payload is not None and b'"status":"UNKNOWN"' in payload:
            payload = payload.replace(b'"status":"UNKNOWN"', b'"status":"FAILED"')
        chain_row = ChainRow(
            run_id=r,
            sequence=row.sequence,
            event_id=row.event_id,
            step_id=row.step_id,
            type=row.type,
            payload_ref=row.payload_ref,
            payload_hash=sha256_digest(payload) if payload is not None else row.payload_hash,
            previous_hash=previous,
            hash="",
            logical_time=utc(row.logical_time),
            recorded_at=utc(row.recorded_at),
        )
        link = row_hash(chain_row, previous)
        await recorded.sql(
            f"UPDATE {EVENTS} SET payload=:p, payload_hash=:ph, previous_hash=:prev, hash=:h "
            "WHERE run_id=:r AND sequence=:s",
            p=payload,
            ph=chain_row.payload_hash,
            prev=previous,
            h=link,
            r=r,
            s=row.sequence,
        )
        if payload is not row.payload:
            await recorded.sql(
                "UPDATE side_effects SET status='FAILED', content_hash=:ph WHERE side_effect_id=:k",
                ph=chain_row.payload_hash,
                k=recorded.side_effect_id,
            )
            await _set_record_field(
                recorded, "side_effects", "FAILED", recorded.side_effect_id, "status"
            )
        previous = link
    await recorded.sql("UPDATE runs SET head_hash=:h WHERE run_id=:r", h=previous, r=r)
    return previous


async def test_delete_the_run_header(recorded: Recorded) -> None:
    await recorded.sql("DELETE FROM runs WHERE run_id=:r", r=recorded.run_id)
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {recorded.events}: run header deleted")


async def test_delete_a_whole_anchored_run(recorded: Recorded) -> None:
    r = recorded.run_id
    for table in (
        "tool_fixtures",
        "prompt_artifacts",
        "policy_decisions",
        "approvals",
        "side_effects",
        "checkpoints",
        EVENTS,
        "runs",
    ):
        await recorded.sql(f"DELETE FROM {table} WHERE run_id=:r", r=r)
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {recorded.events}: run header deleted")
    assert "its events are gone" in summary
    entries, problems = await recorded.anchors.verify()
    assert not problems and any(e.anchor.run_id == r for e in entries)


async def test_edit_the_anchor_log_is_detected(recorded: Recorded) -> None:
    entries, problems = await recorded.anchors.verify()
    assert not problems and entries
    path = recorded.anchors.objects.root / "log" / f"{entries[-1].index:012d}.json"  # type: ignore[attr-defined]
    os.chmod(path, 0o644)
    path.write_text(path.read_text().replace('"sequence":9', '"sequence":8'))
    _, problems = await recorded.anchors.verify()
    assert problems and "was edited" in problems[0].message


# the audit log of raw reads -------------------------------------------------------------------


async def test_edit_an_audit_record(recorded: Recorded) -> None:
    from models.privacy import AuditRecord, RawReadOutcome
    from stores.sql.privacy_records import SqlPrivacyRecords

    records = SqlPrivacyRecords(recorded.database, recorded.anchors)
    ids = [f"audit-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for audit_id in ids:
        await records.audit(
            AuditRecord(
                audit_id=audit_id,
                actor="forensic@acme",
                role="forensic",
                run_id=recorded.run_id,
                sequence=3,
                reason="incident review",
                at=datetime.now(UTC),
                outcome=RawReadOutcome.READ,
            )
        )
    count, hashes, problems = await records.verify_audit()
    assert not problems and count >= 2
    latest = await recorded.anchors.latest(AUDIT_LOG_ID)
    assert latest is not None and latest.anchor.head == hashes[-1]
    t = schema.privacy_audit
    async with recorded.database.read() as conn:
        (original,) = (await conn.execute(select(t.c.record).where(t.c.audit_id == ids[0]))).one()
    forged = dict(original) | {"reason": "nothing to see"}
    async with recorded.database.transaction() as conn:
        await conn.execute(t.update().where(t.c.audit_id == ids[0]).values(record=forged))
    try:
        _, _, problems = await records.verify_audit()
        assert problems and problems[0].message.startswith(f"audit record {ids[0]} at position")
        assert "was edited" in problems[0].message
    finally:  # the audit chain is shared by the session's other tests
        async with recorded.database.transaction() as conn:
            await conn.execute(t.update().where(t.c.audit_id == ids[0]).values(record=original))
