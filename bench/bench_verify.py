"""Benchmark: full run verification against the chain-only check, on a 10,000-event run.

Run with ``.venv/bin/python -m bench.bench_verify [--pg]``. The run mixes plain events with
record-carrying ones (tool fixtures, policy decisions, approvals, side-effect transitions,
checkpoints: one lookup row each), artifact references and a few artifact-stored payloads,
and is anchored. Reported: verified events/s of ``verify(full=False)`` (chain, header) and of
``verify()`` (also payloads, artifacts, lookup rows, freezes, anchor) and their ratio.

Target: the full check within 3x of the chain-only check.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import select

from bench.common import Row, ainterleaved, emit, machine_load
from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecision,
    PolicyDecisionRecord,
    ReplayCheckpoint,
    RunRecord,
    RunStatus,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash, canonicalize
from models.chain import chain_metadata, verify_chain
from stores.anchor_signing import AnchorKeys
from stores.anchors import open_anchor_log
from stores.artifacts import LocalArtifactStore
from stores.case_signing import CaseSigningKey
from stores.sql import schema
from stores.sql.chain_read import stored_header_genesis
from stores.sql.database import Database, open_database
from stores.sql.ledger import NewEvent, SqlLedger, _chain_row
from stores.sql.scratch import create_scratch_database, drop_scratch_database

PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
T0 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
E = ExecutionEventType
EVENTS = 10_000
RATIO_TARGET = 3.0


def _events(run_id: str, state_refs: list[str], count: int = EVENTS) -> list[NewEvent]:
    """A run of ``count`` events in a fixed mix: one in ten a tool call (some of them
    artifact-stored), policy decisions, approvals, side effects, checkpoints, model calls."""
    return [_event(run_id, state_refs, i) for i in range(count)]


def _event(run_id: str, state_refs: list[str], i: int) -> NewEvent:
    at = T0 + timedelta(milliseconds=i)
    kind = i % 10
    action = canonical_hash({"refund": i})
    if kind == 1:
        return NewEvent(f"s{i}", E.TOOL_CALL, at, record=_tool_fixture(i, at))
    if kind == 3:
        record = PolicyDecisionRecord(
            policy_id="refunds",
            policy_version="v3",
            input_hash=action,
            sanitized_input={"i": i},
            decision=PolicyDecision.ALLOW,
        )
        return NewEvent(f"s{i}", E.POLICY_DECISION, at, record=record)
    if kind == 5:
        approval = ApprovalRecord(
            approval_id=f"{run_id}-ap-{i}",
            approver="lead",
            action_hash=action,
            approved_at=at,
            expires_at=at + timedelta(hours=1),
        )
        return NewEvent(f"s{i}", E.APPROVAL, at, record=approval)
    if kind in (6, 7):
        return NewEvent(f"s{i}", E.SIDE_EFFECT, at, record=_side_effect(run_id, i, kind, action))
    if kind == 9 and i % 100 == 9:
        checkpoint = ReplayCheckpoint(
            run_id=run_id,
            step_id=f"s{i}",
            sequence=i + 1,
            state_ref=state_refs[(i // 100) % len(state_refs)],
            state_hash=canonical_hash({"i": i}),
            logical_time=at,
        )
        return NewEvent(f"s{i}", E.CHECKPOINT, at, record=checkpoint)
    return NewEvent(f"s{i}", E.MODEL_CALL, at, payload={"i": i, "text": "ok " * 20})


def _tool_fixture(i: int, at: datetime) -> ToolFixture:
    return ToolFixture(
        tool_call_id=f"tc-{i}",
        capability_id="crm.lookup",
        request_hash=canonical_hash({"i": i}),
        sanitized_request={"i": i},
        # every 500th response is large: an artifact-stored payload
        sanitized_response={"rows": ["r" * 100] * (700 if i % 500 == 1 else 3)},
        outcome=ToolOutcome.SUCCESS,
        started_at=at,
    )


def _side_effect(run_id: str, i: int, kind: int, action: str) -> SideEffectRecord:
    """Side effects in pairs: EXECUTING, then the same one CONFIRMED."""
    se = f"{run_id}-se-{i - (kind - 6)}"
    return SideEffectRecord(
        side_effect_id=se,
        run_id=run_id,
        step_id=f"s{i}",
        capability_id="payment.refund",
        idempotency_key=f"idem-{se}",
        action_hash=action,
        status=SideEffectStatus.EXECUTING if kind == 6 else SideEffectStatus.CONFIRMED,
    )


async def _bench(url: str, root: Path, count: int = EVENTS) -> dict[str, float]:
    db = await open_database(url)
    try:
        artifacts = LocalArtifactStore(root)
        keys = AnchorKeys.of(CaseSigningKey(Ed25519PrivateKey.generate(), "bench"))
        anchors = open_anchor_log(LocalArtifactStore(root / "anchors"), keys)
        ledger = SqlLedger(db, artifacts, anchors=anchors, group_commit=False)
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        await ledger.create_run(
            RunRecord(run_id=run_id, graph_id="bench", graph_version="1", created_at=T0)
        )
        state_refs = [await artifacts.put(f"state {i}".encode()) for i in range(20)]
        events = _events(run_id, state_refs, count)
        for start in range(0, len(events), 500):
            await ledger.append_many(run_id, events[start : start + 500])
        # the header's status and outcome are checked against the terminal event
        await ledger.append(run_id, NewEvent("end", E.RUN_COMPLETED, T0, payload={"outcome": None}))
        await ledger.finish_run(run_id, RunStatus.COMPLETED)
        full = await ledger.verify(run_id)
        assert full.intact, full.summary()
        rates = {}
        for name, is_full in (("chain only", False), ("full", True)):
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                result = await ledger.verify(run_id, full=is_full)
                best = min(best, time.perf_counter() - started)
                assert result.intact
            rates[name] = count / best
        rates.update(await _chain_from_database(db, ledger, run_id, count))
        rates["events"] = count
        rates["checked projections"] = full.checked["projections"]
        rates["checked payloads"] = full.checked["payloads"]
        rates["checked artifacts"] = full.checked["artifacts"]
        return rates
    finally:
        await db.dispose()


#: the stored columns of a run's events (all that its chain covers), as the raw driver reads them
_RAW_ROWS = (
    "SELECT sequence, event_id, step_id, type, payload_ref, payload_hash, previous_hash, hash,"
    " logical_time, recorded_at, schema_version, payload FROM execution_events"
    " WHERE run_id = {mark} ORDER BY sequence"
)


async def _raw_fetch(db: Database, run_id: str) -> int:
    """The run's rows through the driver's own cursor (aiosqlite / asyncpg), nothing else: the
    floor of any verification that reads each event as a row."""
    async with db.read() as conn:
        raw = await conn.get_raw_connection()
        driver: Any = raw.driver_connection
        if conn.dialect.name == "sqlite":
            return len(await driver.execute_fetchall(_RAW_ROWS.format(mark="?"), (run_id,)))
        return len(await driver.fetch(_RAW_ROWS.format(mark="$1"), run_id))


async def _chain_from_database(
    db: Database, ledger: SqlLedger, run_id: str, count: int
) -> dict[str, float]:
    """Events/s of ``verify(full=False)`` (joined texts, fixed metadata template), of the general
    path (row objects, ``verify_chain``), of sha256 over the same chained bytes and of the raw
    driver's fetch of the same rows."""
    e = schema.execution_events.c
    async with db.read() as conn:
        stored = (
            await conn.execute(
                select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
            )
        ).all()
    chained = [
        (row.previous_hash.encode() + canonicalize(chain_metadata(_chain_row(row))), row.payload)
        for row in stored
    ]

    async def fast() -> None:
        assert (await ledger.verify(run_id, full=False)).intact

    async def general() -> None:
        async with db.read() as conn:
            record = (
                await conn.execute(
                    select(schema.runs.c.record).where(schema.runs.c.run_id == run_id)
                )
            ).scalar_one()
            rows = (
                await conn.execute(
                    select(schema.execution_events).where(e.run_id == run_id).order_by(e.sequence)
                )
            ).all()
        # the first event links to the stored header (``models.chain.header_genesis``), as in
        # ``SqlLedger.verify``; the default genesis broke this at sequence 1
        genesis = stored_header_genesis(record)
        assert genesis is not None
        assert verify_chain(run_id, [_chain_row(row) for row in rows], genesis=genesis).intact

    async def sha() -> None:
        for data, payload in chained:
            hashlib.sha256(data).digest()
            if payload is not None:
                hashlib.sha256(payload).digest()

    async def fetch() -> None:
        # EVENTS and the terminal RUN_COMPLETED (the header's outcome is checked against it)
        assert await _raw_fetch(db, run_id) == len(stored)

    times = await ainterleaved({"fast": fast, "general": general, "sha256": sha, "fetch": fetch})
    return {f"chain {name}": count / seconds for name, seconds in times.items()}


def chain_row(backend: str, rates: dict[str, float]) -> Row:
    fast, general, sha = rates["chain fast"], rates["chain general"], rates["chain sha256"]
    fetch, count = rates["chain fetch"], int(rates["events"])
    row = emit(
        Row(
            figure=f"chain verification from the database ({backend}, {count:,} events)",
            value=f"{fast:,.0f} ev/s (general path {general:,.0f} ev/s)",
            baseline=f"sha256 of the same bytes {sha:,.0f} ev/s",
            ratio=fast / sha,
            goal=">= 200k ev/s",
            met=fast >= 200_000,
            load=machine_load(),
        )
    )
    # the floor of reading each event as a row: what a per-row verification cannot beat
    emit(
        Row(
            figure=f"raw driver fetch of the same rows ({backend}, {count:,} events, "
            "no verification)",
            value=f"{fetch:,.0f} ev/s ({1e6 / fetch:.2f} µs a row)",
            baseline=f"chain verification from the database {fast:,.0f} ev/s",
            ratio=fast / fetch,
            goal="—",
            met=None,
            load=machine_load(),
        )
    )
    return row


async def main(pg: bool, events: int = EVENTS) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        backends = {"sqlite": f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"}
        pg_url = await create_scratch_database(PG_ADMIN_URL, "rb_bench") if pg else None
        if pg_url is not None:
            backends["postgresql"] = pg_url
        worst = 0.0
        try:
            for name, url in backends.items():
                rates = await _bench(url, Path(tmp) / f"artifacts-{name}", events)
                chain_row(name, rates)
                ratio = rates["chain only"] / rates["full"]
                worst = max(worst, ratio)
                emit(
                    Row(
                        figure=f"full run verification ({name}, {events:,} events; "
                        f"{rates['checked projections']:.0f} lookup rows, "
                        f"{rates['checked payloads']:.0f} payloads, "
                        f"{rates['checked artifacts']:.0f} artifacts)",
                        value=f"{rates['full']:,.0f} ev/s",
                        baseline=f"chain only {rates['chain only']:,.0f} ev/s",
                        ratio=ratio,
                        goal=f"<= {RATIO_TARGET:g}x the chain-only check",
                        met=ratio <= RATIO_TARGET,
                        load=machine_load(),
                    )
                )
        finally:
            if pg_url is not None:
                await drop_scratch_database(PG_ADMIN_URL, pg_url)
    return 0 if worst <= RATIO_TARGET else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main("--pg" in sys.argv)))
