"""Raw payloads written in one multi-row insert keep every sealed column, whatever the order of
sealed and unsealed rows in the batch (a multi-row INSERT takes its columns from the first
row: a sealed row after an unsealed one used to lose its key and ciphertext silently)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from pydantic import JsonValue

from models import ExecutionEventType, RunRecord
from models.canonical import canonicalize
from models.privacy import RawEvidenceState
from runtime.ports import NewEvent
from stores.sql import privacy as sql_privacy
from stores.sql.ledger import SqlLedger
from tests.runtime.privacy.conftest import PrivacyStack

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SUBJECT = "customer:C-2002"


def _event(i: int, *, sealed: bool) -> NewEvent:
    """A sanitized event: ``sealed`` ones differ from their raw form (kept encrypted)."""
    raw: dict[str, JsonValue] = {"to": f"person-{i}@example.com"} if sealed else {"i": i}
    sanitized: dict[str, JsonValue] = {"to": "<email>"} if sealed else raw
    return NewEvent(
        f"step-{i}",
        ExecutionEventType.TOOL_CALL,
        T0 + timedelta(seconds=i),
        payload=sanitized,
        raw=canonicalize(raw),
        redaction_policy_version="redact-v2",
        subject_id=SUBJECT,
    )


async def _new_run(ledger: SqlLedger) -> str:
    run_id = f"run-raw-{uuid.uuid4().hex[:8]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    )
    return run_id


async def _assert_readable(stack: PrivacyStack, run_id: str, events: list[NewEvent]) -> None:
    for sequence, event in enumerate(events, start=1):
        evidence = await stack.vault.raw_evidence(run_id, sequence, decrypt=True)
        if event.payload == {"i": sequence - 1}:
            assert evidence.state is RawEvidenceState.SAME_AS_SANITIZED
        else:
            assert evidence.state is RawEvidenceState.AVAILABLE, evidence
            assert evidence.content == canonicalize({"to": f"person-{sequence - 1}@example.com"})


async def test_a_sealed_row_after_an_unsealed_one_in_one_batch_keeps_its_ciphertext(
    stack: PrivacyStack,
) -> None:
    run_id = await _new_run(stack.ledger)
    events = [_event(0, sealed=False), _event(1, sealed=True), _event(2, sealed=False)]
    await stack.ledger.append_many(run_id, events)
    await _assert_readable(stack, run_id, events)


async def test_group_committed_appends_of_mixed_rows_keep_every_ciphertext(
    stack: PrivacyStack, monkeypatch: object
) -> None:
    """Many runs handed to the writer together (one transaction, one insert of raw rows), with
    objects in the artifact store for every ciphertext: every row keeps its reference."""
    monkeypatch.setattr(sql_privacy, "INLINE_CIPHERTEXT_LIMIT", 0)  # type: ignore[attr-defined]
    runs = [await _new_run(stack.ledger) for _ in range(4)]
    plans = {
        run_id: [_event(i, sealed=(i + n) % 2 == 1) for i in range(4)]
        for n, run_id in enumerate(runs)
    }
    futures = [
        await stack.ledger.submit(run_id, [event], expected_sequence=i + 1)
        for i in range(4)
        for run_id, events in plans.items()
        for event in [events[i]]
    ]
    await asyncio.gather(*futures)
    for run_id, events in plans.items():
        await _assert_readable(stack, run_id, events)
        sealed = sum(1 for e in events if e.payload != {"i": events.index(e)})
        assert len(await stack.vault.raw_refs(run_id)) == sealed


async def test_verification_reports_raw_content_lost_without_a_deletion(
    stack: PrivacyStack,
) -> None:
    """A sealed row whose ciphertext is gone although no request destroyed it (what the
    multi-row insert bug left behind, or an edit) is reported by ``runs verify``."""
    from sqlalchemy import update

    from stores.sql import schema

    run_id = await _new_run(stack.ledger)
    await stack.ledger.append_many(run_id, [_event(0, sealed=False), _event(1, sealed=True)])
    verification = await stack.ledger.verify(run_id)
    assert verification.intact and verification.checked["raw_payloads"] == 2
    r = schema.raw_payloads.c
    async with stack.db.transaction() as conn:
        await conn.execute(
            update(schema.raw_payloads)
            .where(r.run_id == run_id, r.sequence == 2)
            .values(key_id=None, ciphertext=None, ciphertext_ref=None)
        )
    broken = await stack.ledger.verify(run_id)
    assert not broken.intact
    (problem,) = broken.problems
    assert problem.kind == "raw_payloads" and problem.sequence == 2
    assert "raw evidence lost" in problem.message
