"""Sanitized recording, audited raw reads, legal hold, deletion that keeps the chain valid,
retention sweep — on SQLite and PostgreSQL (local artifact directory), and on S3."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from examples.support_desk.spec import run_scenario
from models.errors import AccessDeniedError, ContentDestroyedError, EvidenceLockedError
from models.privacy import RawEvidenceState, RawReadOutcome, SubjectKind
from runtime.evidence_refs import referenced_artifacts
from tests.runtime.privacy.conftest import PrivacyStack, make_stack

RAW_VALUES = (b"bob@example.com", b"carol@example.com", b"+1-555-0199")
#: the names of both customers sharing the phone (the CRM's records the run read)
NAMES = re.compile(rb"\b(?:Carol|Chen|Bob|Martin)\b", re.IGNORECASE)


async def _wrong_customer(stack: PrivacyStack) -> str:
    result = await run_scenario(stack.world, stack.ledger, stack.artifacts, "wrong-customer")
    return result.run_id


async def _first_tool_call(stack: PrivacyStack, run_id: str) -> int:
    events = await stack.ledger.events(run_id)
    return next(e.sequence for e in events if e.type == "TOOL_CALL")


async def test_recorded_payloads_are_sanitized_and_raw_is_kept_encrypted(stack) -> None:
    run_id = await _wrong_customer(stack)
    blob = b"".join(p or b"" for _, p in await stack.ledger.events_with_payloads(run_id))
    assert not any(value in blob for value in RAW_VALUES)
    assert (await stack.ledger.verify(run_id)).intact
    seq = await _first_tool_call(stack, run_id)
    meta = await stack.vault.raw_evidence(run_id, seq, decrypt=False)
    assert meta.state is RawEvidenceState.AVAILABLE and meta.redaction_policy_version == "redact-v2"
    assert meta.raw_hash != meta.sanitized_hash
    events = {e.sequence: e for e in await stack.ledger.events(run_id)}
    assert meta.sanitized_hash == events[seq].payload_hash  # the chain covers the sanitized hash
    subjects = [s["subject_id"] for s in await stack.vault.subjects(run_id)]
    # Bob, whose record the phone lookup returned too, is a subject of the run (a third party)
    assert subjects == ["customer:C-2002", "customer:C-2001", "tenant:acme"]


async def test_names_the_run_read_are_redacted_and_the_wrong_recipient_is_a_subject(stack) -> None:
    run_id = await _wrong_customer(stack)
    # events and stored artifacts (messages, checkpoint state): no name of either customer,
    # although the CRM answered both records and the e-mail went out as "Hello Bob"
    blob = b"".join(p or b"" for _, p in await stack.ledger.events_with_payloads(run_id))
    for digest in await referenced_artifacts(stack.ledger, stack.evidence, run_id, stack.artifacts):
        blob += await stack.artifacts.get(digest)
    assert b"<name:" in blob and b"<email:" in blob
    assert NAMES.findall(blob) == []
    assert b"Hello <name:" in blob  # the reply the e-mail carried
    seq = await _first_tool_call(stack, run_id)
    bob = next(s for s in await stack.vault.run_subjects(run_id) if s.subject_id.endswith("2001"))
    assert bob.kind is SubjectKind.PERSON and bob.source == "provider:crm.find_by_phone"

    # deleting the third party shreds the raw content of this run too
    receipt = await stack.privacy.delete_subject("customer:C-2001", "DSR-bob")
    assert receipt.runs == (run_id,) and receipt.raw_payloads_destroyed > 0
    with pytest.raises(ContentDestroyedError, match="DSR-bob"):
        await stack.privacy.read_raw_evidence(run_id, seq, actor="ana", reason="check")
    assert (await stack.ledger.verify(run_id)).intact


async def test_raw_read_needs_the_forensic_role_and_a_reason_and_is_audited(stack) -> None:
    run_id = await _wrong_customer(stack)
    seq = await _first_tool_call(stack, run_id)
    with pytest.raises(AccessDeniedError, match="forensic role"):
        await stack.privacy.read_raw_evidence(
            run_id, seq, actor="eng", reason="curious", role="engineer"
        )
    raw = await stack.privacy.read_raw_evidence(run_id, seq, actor="ana", reason="INC-7 review")
    assert raw.content["sanitized_request"] == {"phone": "+1-555-0199"}
    audits = [a for a in await stack.privacy.records.audits() if a.run_id == run_id]
    assert [(a.actor, a.outcome) for a in audits] == [
        ("eng", RawReadOutcome.DENIED),
        ("ana", RawReadOutcome.READ),
    ]
    assert audits[1].reason == "INC-7 review" and audits[1].sequence == seq


async def test_delete_subject_shreds_raw_keeps_the_chain_and_is_refused_under_hold(stack) -> None:
    run_id = await _wrong_customer(stack)
    seq = await _first_tool_call(stack, run_id)
    subject = "customer:C-2002"
    hold, _ = await stack.privacy.hold(run_id, "litigation L-1")
    with pytest.raises(EvidenceLockedError, match=hold.hold_id):
        await stack.privacy.delete_subject(subject, "DSR-held")
    # nothing was destroyed
    assert (await stack.vault.raw_evidence(run_id, seq, decrypt=False)).state is (
        RawEvidenceState.AVAILABLE
    )
    await stack.privacy.release(run_id)

    receipt = await stack.privacy.delete_subject(subject, "DSR-1")
    assert run_id in receipt.runs and receipt.raw_payloads_destroyed > 0
    assert receipt.data_keys_destroyed == 1
    assert (await stack.ledger.verify(run_id)).intact
    with pytest.raises(ContentDestroyedError, match="DSR-1"):
        await stack.privacy.read_raw_evidence(run_id, seq, actor="ana", reason="check")
    # the sanitized view is still there, and the same request again returns its receipt
    assert json.loads(await stack.ledger.payload((await stack.ledger.events(run_id))[seq - 1]))
    assert await stack.privacy.delete_subject(subject, "DSR-1") == receipt


async def test_sweep_destroys_raw_content_past_retention_unless_held(stack) -> None:
    expired = await _wrong_customer(stack)
    held = await _wrong_customer(stack)
    await stack.privacy.hold(held, "regulator request")
    later = stack.vault.clock() + timedelta(days=91)  # STANDARD retention is 90 days
    result = await stack.privacy.sweep(now=later)
    assert expired in {d["run_id"] for d in result["destroyed"]}
    assert held in {h["run_id"] for h in result["held"]}
    seq = await _first_tool_call(stack, expired)
    assert (await stack.vault.raw_evidence(expired, seq, decrypt=False)).state is (
        RawEvidenceState.DESTROYED
    )
    assert (await stack.ledger.verify(expired)).intact
    await stack.privacy.release(held)


async def test_on_s3_holds_use_object_lock_and_deletion_still_verifies(
    private_database, s3_artifact_store
) -> None:
    stack = await make_stack(private_database, s3_artifact_store)
    run_id = await _wrong_customer(stack)
    _, objects = await stack.privacy.hold(run_id, "legal")
    assert objects > 0
    digests = await stack.privacy._objects(run_id)
    assert all([await s3_artifact_store.legal_hold(d) for d in digests])
    await stack.privacy.release(run_id)
    assert not any([await s3_artifact_store.legal_hold(d) for d in digests])
    await stack.privacy.delete_subject("customer:C-2002", "DSR-s3")
    assert (await stack.ledger.verify(run_id)).intact


async def test_a_recorded_run_s_data_key_is_made_with_its_header(
    stack: PrivacyStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's raw content is sealed under a key committed with the run's header: no read
    that misses and no transaction of its own at the first seal (on PostgreSQL, round trips
    on the event loop while the run's first step goes on)."""
    reads: list[str] = []
    read = stack.vault._read_active_key

    async def counted(subject_id: str, *, create: bool) -> tuple[str, bytes] | None:
        reads.append(subject_id)
        return await read(subject_id, create=create)

    monkeypatch.setattr(stack.vault, "_read_active_key", counted)
    run_id = await _wrong_customer(stack)
    assert reads == []
    seq = await _first_tool_call(stack, run_id)
    assert (await stack.vault.raw_evidence(run_id, seq, decrypt=False)).state is (
        RawEvidenceState.AVAILABLE
    )
    raw = await stack.privacy.read_raw_evidence(run_id, seq, actor="ana", reason="key check")
    assert raw.content["sanitized_request"] == {"phone": "+1-555-0199"}
