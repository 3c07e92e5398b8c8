"""Writes one run's evidence into the ledger, in order, stamped with logical time.

Synchronous observations (clock reads) are buffered and written just before the next event,
in the same transaction, so the order the agent saw is the order the chain records.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog
from pydantic import JsonValue

from models import (
    ExecutionEvent,
    ExecutionEventType,
    HashedRecord,
    ReplayCheckpoint,
    format_instant,
)
from models.canonical import canonicalize
from models.digest import sha256_digest
from runtime.clock import SystemAgentClock
from runtime.ports import ArtifactStore, EventLedger, NewEvent

log = structlog.get_logger(__name__)
E = ExecutionEventType


class RunRecorder:
    def __init__(
        self,
        ledger: EventLedger,
        artifacts: ArtifactStore,
        run_id: str,
        clock: SystemAgentClock | None = None,
        *,
        deferred: bool = False,
    ) -> None:
        self.ledger = ledger
        self.artifacts = artifacts
        self.run_id = run_id
        # agent reads of the clock are buffered here and written before the next event
        self.clock = clock or SystemAgentClock(on_read=self.buffer_clock_read)
        self.step_id = "run"
        self._pending: list[NewEvent] = []
        self.last_sequence = 0
        #: deferred: keep every event until ``flush`` writes them in one atomic append (a replay
        #: step is recorded whole or not at all, so a retried step never duplicates events)
        self.deferred = deferred

    def logical_time(self) -> datetime:
        return self.clock.logical_time()

    def buffer_clock_read(self, value: datetime) -> None:
        self._pending.append(
            NewEvent(self.step_id, E.CLOCK_READ, value, payload={"value": format_instant(value)})
        )

    async def record(
        self,
        type: ExecutionEventType,
        *,
        record: HashedRecord | None = None,
        payload: JsonValue = None,
        step_id: str | None = None,
    ) -> ExecutionEvent | None:
        """Append one event (after any buffered ones) and return it once it is durable; in
        deferred mode only buffer it (and return None)."""
        event = NewEvent(
            step_id or self.step_id, type, self.logical_time(), record=record, payload=payload
        )
        if self.deferred:
            self._pending.append(event)
            return None
        events = [*self._pending, event]
        self._pending.clear()
        appended = await self.ledger.append_many(self.run_id, events)
        self.last_sequence = appended[-1].sequence
        return appended[-1]

    async def flush(self, *, expected_sequence: int | None = None) -> None:
        if self._pending:
            events = list(self._pending)
            appended = await self.ledger.append_many(
                self.run_id, events, expected_sequence=expected_sequence
            )
            self._pending.clear()
            self.last_sequence = appended[-1].sequence

    async def store_json(self, value: Any) -> str:
        """Put canonical JSON into the artifact store; returns its digest."""
        return await self.artifacts.put(canonicalize(value))

    async def checkpoint(
        self,
        step_id: str,
        state: dict[str, Any],
        schema_version: int,
        context_snapshot_id: str | None,
    ) -> ReplayCheckpoint:
        data = canonicalize(state)
        state_ref = await self.artifacts.put(data)
        checkpoint = ReplayCheckpoint(
            run_id=self.run_id,
            step_id=step_id,
            sequence=self.last_sequence + len(self._pending) + 1,
            state_ref=state_ref,
            state_hash=sha256_digest(data),
            context_snapshot_id=context_snapshot_id,
            logical_time=self.logical_time(),
            state_schema_version=schema_version,
        )
        await self.record(E.CHECKPOINT, record=checkpoint, step_id=step_id)
        return checkpoint
