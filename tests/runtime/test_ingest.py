"""Ingestion core: an agent written without our runtime reports its run as events; it verifies
intact, scores completeness honestly, replays in ``recorded`` mode with the identical tool
sequence, and re-sending is idempotent while a conflicting event is refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.local_replay import engine_for, replay_locally
from ingest import ingest_events, ingest_run
from models import ReplayMode, SideEffectRecord, SideEffectStatus
from models.errors import ConflictError, InvalidInputError, SequenceConflictError
from models.ingest import (
    IngestEventBatch,
    IngestRunHeader,
    IngestTool,
)
from runtime.completeness import evidence_completeness

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


# --- a plain agent: its own loop, its own tools, its own (scripted) model -----------------------


def restaurant_tools() -> dict[str, Any]:
    tables = {"luigi": 2}

    def find_restaurant(args: dict[str, Any]) -> str:
        return json.dumps(
            {"name": "luigi", "cuisine": args["cuisine"], "free_tables": tables["luigi"]}
        )

    def book_table(args: dict[str, Any]) -> str:
        if tables[args["restaurant"]] == 0:
            return "Error: no table left"
        tables[args["restaurant"]] -= 1
        return json.dumps({"booking": f"B-{args['people']}-{args['time']}"})

    return {"find_restaurant": find_restaurant, "book_table": book_table}


def scripted_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Stands in for an LLM: decides from the conversation."""
    last = messages[-1]
    if last["role"] == "user" and "italian" in last["content"]:
        return {
            "content": None,
            "tool_calls": [
                {"id": "c1", "name": "find_restaurant", "arguments": {"cuisine": "italian"}}
            ],
        }
    if last["role"] == "tool" and last["name"] == "find_restaurant":
        return {"content": "Luigi has tables. Shall I book for 2 at 19:00?", "tool_calls": []}
    if last["role"] == "user" and last["content"].startswith("yes"):
        args = {"restaurant": "luigi", "people": 2, "time": "19:00"}
        return {
            "content": None,
            "tool_calls": [{"id": "c2", "name": "book_table", "arguments": args}],
        }
    return {"content": "Booked. Enjoy your dinner!", "tool_calls": []}


class EventClient:
    """What a client library would do: number events, send them in batches."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.clock = START

    def add(self, event: dict[str, Any]) -> None:
        self.clock += timedelta(seconds=1)
        self.events.append(
            {**event, "sequence": len(self.events) + 1, "at": self.clock.isoformat()}
        )


def run_plain_agent(user_lines: list[str]) -> EventClient:
    tools = restaurant_tools()
    client = EventClient()
    conversation: list[dict[str, Any]] = []
    for index, line in enumerate(user_lines):
        done = index == len(user_lines) - 1
        client.add({"type": "user_message", "content": line, "done": done})
        conversation.append({"role": "user", "content": line})
        if done:
            break
        while True:
            answer = scripted_model(conversation)
            client.add(
                {
                    "type": "model_call",
                    "model": "scripted-1",
                    **answer,
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                }
            )
            conversation.append({"role": "assistant", **answer})
            if not answer["tool_calls"]:
                break
            for call in answer["tool_calls"]:
                output = tools[call["name"]](call["arguments"])
                client.add(
                    {
                        "type": "tool_call",
                        "tool_call_id": call["id"],
                        "name": call["name"],
                        "arguments": call["arguments"],
                        "output": output,
                        "outcome": "ERROR" if output.startswith("Error") else "SUCCESS",
                    }
                )
                conversation.append({"role": "tool", "name": call["name"], "content": output})
    client.add({"type": "run_end", "outcome": {"booked": True}})
    return client


def header(run_id: str) -> IngestRunHeader:
    return IngestRunHeader(
        run_id=run_id,
        started_at=START,
        system_prompt="You book restaurant tables. Confirm before booking.",
        tools=(
            IngestTool(name="find_restaurant", side_effect_class="READ"),
            IngestTool(name="book_table", destructive_hint=True),
        ),
        labels={"agent": "plain-script"},
        max_model_calls=10,
    )


USER_LINES = ["I want italian food tonight", "yes please", "thanks, bye"]


async def _ingest(rec, run_id: str) -> EventClient:
    client = run_plain_agent(USER_LINES)
    await ingest_run(rec.ledger, rec.artifacts, header(run_id))
    batch = IngestEventBatch.model_validate({"events": client.events[:4]})
    await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch.events)
    rest = IngestEventBatch.model_validate({"events": client.events[4:]})
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, rest.events)
    assert result.ended and result.next_sequence == len(client.events) + 1
    return client


async def test_plain_agent_is_ingested_verified_and_replays_identically(rec) -> None:
    run_id = "plain-agent-1"
    await _ingest(rec, run_id)
    assert (await rec.ledger.verify(run_id)).intact
    run = await rec.ledger.get_run(run_id)
    assert run.status.value == "COMPLETED" and run.outcome == {"ended_by": "user"}
    effects = await rec.evidence.records(SideEffectRecord, run_id)
    # one write, its row at its last state (PLANNED → EXECUTING → CONFIRMED are in the chain)
    assert [(e.capability_id, e.status) for e in effects] == [
        ("book_table", SideEffectStatus.CONFIRMED)
    ]
    completeness = await evidence_completeness(rec.ledger, rec.evidence, rec.artifacts, run_id)
    assert completeness.missing == ("policy", "environment")  # honestly not recorded

    local = await replay_locally(engine_for(rec), run_id, ReplayMode.RECORDED)
    assert local.prepared.ok, local.prepared.problems
    assert local.stopped is None and local.fixture_misses == 0 and local.model_calls == 0
    comparison = local.comparison
    assert comparison is not None and comparison.same_tool_sequence and comparison.same_outcome
    assert comparison.same_side_effects and comparison.answer_similarity == 1.0
    assert comparison.diffs == ()
    assert local.reproduced and local.writes_blocked == 1
    assert local.prepared.confidence.value == "LIMITED"


async def test_resending_is_idempotent_and_a_conflict_is_refused(rec) -> None:
    run_id = "plain-agent-2"
    client = await _ingest(rec, run_id)
    head = (await rec.ledger.events(run_id))[-1].sequence
    again = await ingest_run(rec.ledger, rec.artifacts, header(run_id))
    assert again.recorded == 0
    batch = IngestEventBatch.model_validate({"events": client.events})
    result = await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, batch.events)
    assert result.recorded == 0 and result.duplicates == len(client.events)
    assert (await rec.ledger.events(run_id))[-1].sequence == head

    changed = dict(client.events[1], content="something else")
    with pytest.raises(SequenceConflictError, match="event 2 is already recorded"):
        await ingest_events(
            rec.ledger,
            rec.artifacts,
            rec.evidence,
            run_id,
            IngestEventBatch.model_validate({"events": [changed]}).events,
        )
    other = header(run_id).model_copy(update={"system_prompt": "another prompt"})
    with pytest.raises(ConflictError, match="another header"):
        await ingest_run(rec.ledger, rec.artifacts, other)
    assert (await rec.ledger.events(run_id))[-1].sequence == head
    assert (await rec.ledger.verify(run_id)).intact


async def test_out_of_order_and_bad_events_are_refused_naming_the_problem(rec) -> None:
    run_id = "plain-agent-3"
    await ingest_run(rec.ledger, rec.artifacts, header(run_id))
    gap = IngestEventBatch.model_validate(
        {"events": [{"type": "user_message", "sequence": 3, "content": "hi"}]}
    )
    with pytest.raises(SequenceConflictError, match="event 3 is out of order; the next event is 1"):
        await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, gap.events)
    with pytest.raises(ValueError, match=r"events\.0\.tool_call\.name"):
        IngestEventBatch.model_validate({"events": [{"type": "tool_call", "sequence": 1}]})
    reserved = IngestEventBatch.model_validate(
        {"events": [{"type": "tool_call", "sequence": 1, "name": "user.reply"}]}
    )
    with pytest.raises(InvalidInputError, match="reserved"):
        await ingest_events(rec.ledger, rec.artifacts, rec.evidence, run_id, reserved.events)
    assert len(await rec.ledger.events(run_id)) == 3  # header events only: nothing half-written
