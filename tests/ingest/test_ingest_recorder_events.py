"""The ledger events ``IngestRecorder.record`` buffers are those the recorder runtime makes
(``RunRecorder._event``) under the ingestion's event id: the same sanitized payload or record,
raw bytes, policy and subject, and the same canonical bytes, which the ingestion recorder
hands over made once (``NewEvent.payload_bytes``) where the ledger made them again. Pure
code: no store is written (the recorder only buffers)."""

from __future__ import annotations

import dataclasses
import typing
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from ingest.recorder import IngestRecorder, _has_writer
from models import (
    ExecutionEventType,
    HashedRecord,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonicalize
from models.redaction import pseudonym_subjects, redaction_policy
from runtime.ports import NewEvent, WriteBehindLedger
from runtime.recorder import RunRecorder

E = ExecutionEventType
AT = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "run-events"
PERSON = "Mail jana.novakova@example.org or call +49 151 2345 6789, card 4111 1111 1111 1111"


def _fixture(response: Any) -> ToolFixture:
    return ToolFixture(
        tool_call_id="call-1",
        capability_id="user.reply",
        request_hash="sha256:" + "0" * 64,
        sanitized_request={"turn": 1, "note": "api_key=sk-abcdefabcdefabcdefabcdef"},
        sanitized_response=response,
        outcome=ToolOutcome.SUCCESS,
        started_at=AT,
        completed_at=AT,
        run_id=RUN,
        step_id="user",
        side_effect_class=SideEffectClass.READ,
    )


def _effect(receipt: str) -> SideEffectRecord:
    return SideEffectRecord(
        side_effect_id="se-1",
        run_id=RUN,
        step_id="tools",
        capability_id="orders.refund",
        idempotency_key="idem-1",
        action_hash="sha256:" + "1" * 64,
        status=SideEffectStatus.CONFIRMED,
        provider_request_id="preq-1",
        provider_receipt=receipt,
    )


CASES: list[tuple[ExecutionEventType, HashedRecord | None, Any]] = [
    (E.STEP_STARTED, None, {"step": "user"}),
    (E.STEP_COMPLETED, None, {"next": "model", "output": None}),
    (E.OPAQUE, None, {"source": "agent", "reason": "note", "data": {"text": PERSON}}),
    (E.OPAQUE, None, {"password": "hunter2", "list": [PERSON, 1, 2.5, True, None]}),
    (E.TOOL_CALL, _fixture({"content": "nothing personal here", "done": False}), None),
    (E.TOOL_CALL, _fixture({"content": PERSON, "done": False}), None),
    (E.SIDE_EFFECT, _effect("receipt 42"), None),
    (E.SIDE_EFFECT, _effect(PERSON), None),
]


def _recorders(version: str) -> tuple[IngestRecorder, RunRecorder]:
    policy = redaction_policy(version, ())
    placeholder = cast(Any, object())  # a deferred recorder only buffers: no store is used
    ours = IngestRecorder(placeholder, placeholder, RUN, AT, head=0)
    ours.redaction = policy
    reference = RunRecorder(placeholder, placeholder, RUN, ours.ingest_clock, deferred=True)
    reference.redaction = policy
    return ours, reference


def _fields(event: NewEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.compare}


@pytest.mark.parametrize("version", ["redact-v1", "redact-v2"])
async def test_events_are_the_recorder_runtimes_under_the_ingestion_id(version: str) -> None:
    ours, reference = _recorders(version)
    ours.begin(3, "abcdef0123456789", AT)
    ours.step_id = reference.step_id = "user"
    redacted = 0
    for n, (type_, record, payload) in enumerate(CASES, start=1):
        await ours.record(type_, record=record, payload=payload)
        made = ours.buffered[-1]
        expected = dataclasses.replace(
            reference._event("user", type_, record, payload),
            event_id=f"{RUN}:3:{n}:abcdef0123456789",
        )
        assert _fields(made) == _fields(expected)
        assert made.payload_json() == expected.payload_json()
        # the canonical bytes are handed over made, and are those the ledger would make
        assert made.payload_bytes is not None
        assert made.canonical_payload() == canonicalize(expected.payload_json())
        assert made.canonical_payload() == expected.canonical_payload()
        redacted += made.raw != made.canonical_payload()
    assert redacted >= 4  # the cases above do exercise the redacted branch
    # the people the sanitized payloads name became the recorder's subjects
    names = set().union(*(pseudonym_subjects(e.canonical_payload()) for e in ours.buffered))
    assert ours.subjects == names and any(s.startswith("email:") for s in names)
    assert all(PERSON not in e.canonical_payload().decode() for e in ours.buffered)


async def test_without_a_policy_events_are_recorded_as_given() -> None:
    placeholder = cast(Any, object())
    ours = IngestRecorder(placeholder, placeholder, RUN, AT, head=0)
    ours.begin(1, "0123456789abcdef", AT)
    await ours.record(E.OPAQUE, payload={"text": PERSON})
    (event,) = ours.buffered
    assert event.payload == {"text": PERSON} and event.raw is None
    assert event.event_id == f"{RUN}:1:1:0123456789abcdef"
    assert ours.subjects == set()


def test_whether_a_ledger_has_a_writer_is_the_protocols_answer() -> None:
    """``_has_writer`` remembers ``isinstance(ledger, WriteBehindLedger)`` per ledger object."""
    members = typing._get_protocol_attrs(WriteBehindLedger)  # type: ignore[attr-defined]
    writer_type = type("Writer", (), dict.fromkeys(members, lambda *_: None))

    class Plain:
        pass

    ledgers = [writer_type(), Plain(), writer_type(), Plain()]
    for _ in range(2):  # asked again: the remembered answer
        assert [_has_writer(cast(Any, x)) for x in ledgers] == [True, False, True, False]
        assert [isinstance(x, WriteBehindLedger) for x in ledgers] == [True, False, True, False]
