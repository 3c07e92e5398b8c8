"""An incident report shows what the sandbox refused a replay beside its isolation."""

from __future__ import annotations

import json
from types import SimpleNamespace

from forensics.report_gather import replay_isolation
from models import ExecutionEventType

E = ExecutionEventType


class Ledger:
    def __init__(self, events: list[tuple[ExecutionEventType, dict]]) -> None:
        self.events = events

    async def events_with_payloads(self, run_id: str, *, types: frozenset) -> list:
        return [
            (SimpleNamespace(type=t), json.dumps(p).encode()) for t, p in self.events if t in types
        ]


async def test_a_refused_replay_shows_the_refusal_beside_its_isolation() -> None:
    refused = "tool.read of 'crm.find_by_phone': the replay's miss policy is FAIL"
    ledger = Ledger(
        [
            (E.STEP_STARTED, {"isolation": "bubblewrap"}),
            (E.RUN_FAILED, {"error": "SandboxViolationError", "message": refused}),
        ]
    )
    shown = await replay_isolation(ledger, "replay-1", None)
    assert shown == f"bubblewrap; refused: {refused}"
    ordinary = Ledger(
        [(E.STEP_STARTED, {"isolation": "bubblewrap"}), (E.RUN_FAILED, {"error": "X"})]
    )
    assert await replay_isolation(ordinary, "replay-2", None) == "bubblewrap"
