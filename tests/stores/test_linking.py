"""Linking a batch (pure unit tests): the rows and events of ``link_batch`` are what the
chain and the model say, and an appended event built without validating again is the event
validation builds — or, for anything the cheap checks do not vouch for, validation's own
result or refusal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import ValidationError

from models import ExecutionEvent, ExecutionEventType
from models.canonical import canonicalize
from models.chain import GENESIS_HASH, ChainRow, row_hash
from models.digest import sha256_digest
from runtime.ports import NewEvent
from stores.sql import linking
from stores.sql.linking import AppendRequest, appended_event, link_batch

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
E = ExecutionEventType


def request(run_id: str, events: list[NewEvent], expected: int | None = None) -> AppendRequest:
    prepared: list[tuple[str, str, bytes | None, dict[str, Any] | None]] = []
    for event in events:
        data = canonicalize(event.payload_json())
        prepared.append(("inline", sha256_digest(data), data, None))
    return AppendRequest(run_id, events, prepared, expected)


def validated(made: ExecutionEvent) -> ExecutionEvent:
    return ExecutionEvent(**made.model_dump())


def test_linked_rows_chain_onto_the_heads_and_the_events_are_the_validated_ones() -> None:
    events = [
        NewEvent(f"s-{i}", E.TOOL_CALL, T0 + timedelta(seconds=i), payload={"i": i})
        for i in range(3)
    ]
    heads = {"run-a": (4, GENESIS_HASH), "run-b": (0, GENESIS_HASH)}
    batch = link_batch([request("run-a", events[:2]), request("run-b", events[2:])], heads, T0)
    previous = GENESIS_HASH
    for row in batch.rows[:2]:
        chain_row = ChainRow(**{k: v for k, v in row.items() if k != "payload"})
        assert row["previous_hash"] == previous
        assert row["hash"] == row_hash(chain_row, previous)
        previous = row["hash"]
    assert heads == {"run-a": (6, previous), "run-b": (1, batch.rows[2]["hash"])}
    assert linking._TRUSTED_CONSTRUCTION  # the events below are built without validation
    appended = [e for per_request in batch.results for e in per_request]
    assert [e.sequence for e in appended] == [5, 6, 1]
    for event in appended:
        again = validated(event)
        assert event == again and event.model_dump() == again.model_dump()
        assert event.model_dump_json() == again.model_dump_json()
        assert hash(event) == hash(again)


def _appended(
    event: NewEvent, *, run_id: str = "run-a", recorded_at: datetime = T0
) -> ExecutionEvent:
    digest = sha256_digest(b"x")
    return appended_event(
        run_id, 1, event, str(event.type), "inline", digest, GENESIS_HASH, digest, recorded_at
    )


def test_what_the_cheap_checks_do_not_vouch_for_is_validated() -> None:
    # another time zone: validation moves it to UTC, as for every event
    paris = timezone(timedelta(hours=2))
    moved = _appended(NewEvent("s", E.TOOL_CALL, T0.astimezone(paris)))
    assert moved.logical_time == T0 and moved.logical_time.tzinfo is UTC
    # refused as the model refuses them
    with pytest.raises(ValidationError, match="event_id"):
        _appended(NewEvent("s", E.TOOL_CALL, T0, event_id=""))
    with pytest.raises(ValidationError, match="event_id"):
        _appended(NewEvent("s", E.TOOL_CALL, T0, event_id="x" * 513))
    with pytest.raises(ValidationError, match="logical_time"):
        _appended(NewEvent("s", E.TOOL_CALL, datetime(2026, 8, 20, 10, 15)))
    with pytest.raises(ValidationError, match="type"):
        _appended(NewEvent("s", "NOT_A_TYPE", T0))  # type: ignore[arg-type]
