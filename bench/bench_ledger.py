"""Benchmark: ledger appends (SQLite and PostgreSQL) and chain verification.

Run with ``.venv/bin/python -m bench.bench_ledger`` (or all benchmarks: ``python -m bench``).
Baselines measured in the same run:

* appends: the raw driver's INSERT of an ``execution_events``-shaped row per transaction on
  the same database (no SQLAlchemy), with no chain (no head lock, no link hash, no
  compare-and-set): one connection against the lone appender, ``WRITERS`` connections against
  ``WRITERS`` concurrent appenders, in rounds interleaved with them. The ratio is the price of
  the chain.
* verification: one SHA-256 over each event's canonical metadata and payload (the least any
  verification must do). The ratio is our overhead over that floor.

Targets to aim at: >= 5,000 appends/s, >= 200,000 verified events/s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Column, MetaData, Table

from bench.common import Row, Spread, emit, interleaved_samples, machine_load
from models import ExecutionEventType, RunRecord
from models.canonical import canonicalize
from models.chain import GENESIS_HASH, ChainRow, chain_metadata, row_hash, verify_chain
from models.digest import sha256_digest
from models.errors import StoreError
from runtime.recorder import RunRecorder
from stores.artifacts import LocalArtifactStore
from stores.sql import schema
from stores.sql.database import Database, open_database
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.scratch import create_scratch_database, drop_scratch_database

#: interleaved rounds of the concurrent-writer figures (median and spread reported)
CONCURRENT_ROUNDS = 5
#: the share of the events the one-commit-each baseline writes a round (it is 10-30x slower)
ONE_EACH_SHARE = 4
PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: concurrent recorders, each appending to its own run (the table's "8 writers")
WRITERS = 8
T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
APPEND_TARGET = 5_000
VERIFY_TARGET = 200_000

#: the raw driver's table: execution_events' columns, types and keys (the same row shape as
#: the ledger's), without the foreign key to runs
_baseline = Table(
    "bench_raw_events",
    MetaData(),
    *(
        Column(
            c.name,
            c.type,
            primary_key=c.primary_key,
            nullable=c.nullable,
            unique=c.unique,
            autoincrement=False,
        )
        for c in schema.execution_events.columns
    ),
)
#: interleaved rounds of the 1-writer row (ledger and raw driver in turn; medians and spread)
SINGLE_ROUNDS = 3


def _event(i: int) -> NewEvent:
    payload: JsonValue = {"tool": "crm.lookup", "arguments": {"customer_id": f"C-{i}"}, "i": i}
    return NewEvent(
        f"step-{i}", ExecutionEventType.TOOL_CALL, T0 + timedelta(seconds=i), payload=payload
    )


@dataclass
class Rate:
    """Events per second and the process's CPU time per event (every thread's)."""

    per_second: float
    cpu_ms: float

    @classmethod
    def of(cls, events: int, started: tuple[float, float]) -> Rate:
        wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
        return cls(events / wall, cpu / events * 1000)


def _median_rate(rates: list[Rate]) -> Rate:
    """The round with the median rate (its CPU time with it)."""
    return sorted(rates, key=lambda rate: rate.per_second)[len(rates) // 2]


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


async def _new_runs(ledger: SqlLedger, count: int) -> list[str]:
    runs = []
    for _ in range(count):
        run_id = f"bench-{uuid.uuid4().hex[:8]}"
        await ledger.create_run(
            RunRecord(run_id=run_id, graph_id="bench", graph_version="1", created_at=T0)
        )
        runs.append(run_id)
    return runs


async def _concurrent_rate(db: Database, n: int, writers: int, group_commit: bool) -> Rate:
    """``writers`` recorders appending one event at a time, each to its own run, each
    waiting for its append to be committed before the next (at most ``writers`` events per
    transaction)."""
    ledger = SqlLedger(db, group_commit=group_commit)
    runs = await _new_runs(ledger, writers)
    per_writer = n // writers
    # the events made before the clock starts, as the raw driver's rows are (the ledger still
    # canonicalizes, hashes and links each one on the clock; the raw driver's rows come with
    # their canonical payload and its digest made)
    events = {run_id: [_event(i) for i in range(per_writer)] for run_id in runs}

    async def writer(run_id: str) -> None:
        for event in events[run_id]:
            await ledger.append(run_id, event)

    started = _clocks()
    await asyncio.gather(*(writer(r) for r in runs))
    return Rate.of(per_writer * writers, started)


async def _raw_concurrent_rate(db: Database, n: int, writers: int, round_no: int) -> Rate:
    """The 8-writer baseline: the raw driver on ``writers`` connections of the pool at once,
    each inserting ``execution_events``-shaped rows one per transaction, the rows made before
    the clock starts (what the database gives concurrent writers with no chain)."""
    per_writer = n // writers
    rows = [
        _raw_rows(f"raw-{uuid.uuid4().hex[:8]}", per_writer, round_no, db.is_postgresql)
        for _ in range(writers)
    ]
    names = ", ".join(c.name for c in _baseline.columns)
    marks = ", ".join(
        f"${k + 1}" if db.is_postgresql else "?" for k in range(len(_baseline.columns))
    )
    sql = f"INSERT INTO {_baseline.name} ({names}) VALUES ({marks})"
    conns = [await db.engine.connect() for _ in range(writers)]
    try:
        drivers: list[Any] = [(await conn.get_raw_connection()).driver_connection for conn in conns]

        async def writer(driver: Any, mine: list[tuple[Any, ...]]) -> None:
            for row in mine:
                if db.is_postgresql:  # a lone statement is its own transaction
                    await driver.execute(sql, *row)
                else:  # the pool's connections run without the driver's implicit transactions
                    await driver.execute("BEGIN IMMEDIATE")
                    await driver.execute(sql, row)
                    await driver.execute("COMMIT")

        started = _clocks()
        await asyncio.gather(*(writer(d, mine) for d, mine in zip(drivers, rows, strict=True)))
        return Rate.of(per_writer * writers, started)
    finally:
        for conn in conns:
            await conn.close()


async def _write_behind_rate(db: Database, n: int, writers: int) -> Rate:
    """``writers`` recorders in write-behind mode (as ``record_run`` records): each hands its
    events to the writer without waiting, and waits for all of them at the end (the run's
    durable point)."""
    ledger = SqlLedger(db)
    runs = await _new_runs(ledger, writers)
    per_writer = n // writers
    # the payloads made before the clock starts, as the 8 awaiting writers' events are (each
    # used to cost a whole throw-away ``NewEvent`` here, its uuid4 included)
    payloads = [_event(i).payload for i in range(per_writer)]

    async def recorder(run_id: str, artifacts: LocalArtifactStore) -> None:
        rec = RunRecorder(ledger, artifacts, run_id, write_behind=True)
        for payload in payloads:
            await rec.record(ExecutionEventType.TOOL_CALL, payload=payload)
        await rec.flush()

    with tempfile.TemporaryDirectory() as tmp:  # not written to: record() keeps no artifact
        artifacts = LocalArtifactStore(Path(tmp))
        started = _clocks()
        await asyncio.gather(*(recorder(r, artifacts) for r in runs))
        return Rate.of(per_writer * writers, started)


async def _append_rates(db: Database, n: int, batch: int) -> dict[str, Any]:
    # the ledger as the recorder uses it (its writer caches the run's head): a lone appender
    # that waits for each append still pays one commit per event
    ledger = SqlLedger(db)
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="bench", graph_version="1", created_at=T0)
    )
    async with db.engine.begin() as conn:
        await conn.run_sync(_baseline.create, checkfirst=True)
    # interleaved rounds of the ledger and the raw driver, the same row shape, in turn (one
    # measurement of each flipped the row between 0.43x and 1.09x)
    per_round = max(1, n // SINGLE_ROUNDS)
    singles: list[Rate] = []
    plains: list[Rate] = []
    written = 0
    for r in range(SINGLE_ROUNDS):
        for which in ("ledger", "raw") if r % 2 == 0 else ("raw", "ledger"):
            if which == "ledger":
                started = _clocks()
                for i in range(written, written + per_round):
                    await ledger.append(run_id, _event(i))
                singles.append(Rate.of(per_round, started))
                written += per_round
            else:
                plains.append(await _raw_driver_rate(db, run_id, per_round, r))
    single = _median_rate(singles)
    plain = _median_rate(plains)
    single_ratios = Spread.of(
        [a.per_second / b.per_second for a, b in zip(singles, plains, strict=True)]
    )

    started = _clocks()
    for i in range(0, n, batch):
        await ledger.append_many(run_id, [_event(written + j) for j in range(i, i + batch)])
    batched = Rate.of(n, started).per_second

    verify_started = time.perf_counter()
    result = await ledger.verify(run_id)
    verify_from_db = result.event_count / (time.perf_counter() - verify_started)
    assert result.intact, result.summary()
    # interleaved rounds (the order turning each round), medians and spreads: one round of 8
    # writers swings 2x with what else runs, and the raw driver's 8 connections with it
    rounds: dict[str, list[Rate]] = {"plain": [], "group": [], "raw": [], "behind": []}
    measures = {
        "group": lambda r: _concurrent_rate(db, n, WRITERS, group_commit=True),
        "raw": lambda r: _raw_concurrent_rate(db, n, WRITERS, 100 + r),
        "plain": lambda r: _concurrent_rate(
            db, max(WRITERS, n // ONE_EACH_SHARE), WRITERS, group_commit=False
        ),
        "behind": lambda r: _write_behind_rate(db, n, WRITERS),
    }
    try:  # on a crowded machine SQLite's lock wait can run out: reported, not fatal
        for r in range(CONCURRENT_ROUNDS):
            order = list(measures) if r % 2 == 0 else list(reversed(measures))
            for name in order:
                rounds[name].append(await measures[name](r))
    except StoreError as exc:
        print(f"ledger append, {WRITERS} writers: {exc}", flush=True)
        rounds = {name: [Rate(float("nan"), float("nan"))] for name in rounds}
    return {
        "concurrent_one_commit_each": _median_rate(rounds["plain"]),
        "concurrent_group_commit": _median_rate(rounds["group"]),
        "concurrent_raw_driver": _median_rate(rounds["raw"]),
        "write_behind": _median_rate(rounds["behind"]),
        "group_rounds": [rate.per_second for rate in rounds["group"]],
        "raw_rounds": [rate.per_second for rate in rounds["raw"]],
        "group_raw_ratios": [
            a.per_second / b.per_second for a, b in zip(rounds["group"], rounds["raw"], strict=True)
        ],
        "single": single,
        "single_rounds": [rate.per_second for rate in singles],
        "plain_rounds": [rate.per_second for rate in plains],
        "single_ratios": single_ratios,
        "batched": batched,
        "plain_insert": plain,
        "verify_from_db": verify_from_db,
    }


def _raw_rows(run_id: str, n: int, round_no: int, postgresql: bool) -> list[tuple[Any, ...]]:
    """Rows of execution_events' shape and sizes (ids, digests, times, canonical payload)."""
    rows = []
    for i in range(n):
        payload = canonicalize(_event(i).payload)
        digest = sha256_digest(payload)
        when: Any = T0 + timedelta(seconds=i)
        now: Any = datetime.now(UTC)
        if not postgresql:  # SQLAlchemy stores SQLite datetimes as text
            when, now = when.isoformat(sep=" "), now.isoformat(sep=" ")
        rows.append(
            (
                run_id,
                round_no * 10_000_000 + i + 1,
                str(uuid.uuid4()),
                f"step-{i}",
                ExecutionEventType.TOOL_CALL.value,
                "inline",
                digest,
                digest,
                digest,
                when,
                now,
                1,
                payload,
            )
        )
    return rows


async def _raw_driver_rate(db: Database, run_id: str, n: int, round_no: int) -> Rate:
    """The issue's baseline: the raw driver (aiosqlite / asyncpg, no SQLAlchemy) inserting a
    row of execution_events' shape per transaction, the rows made before the clock starts."""
    rows = _raw_rows(run_id, n, round_no, db.is_postgresql)
    names = ", ".join(c.name for c in _baseline.columns)
    async with db.engine.connect() as conn:
        driver: Any = (await conn.get_raw_connection()).driver_connection
        started = _clocks()
        if db.is_postgresql:
            marks = ", ".join(f"${k + 1}" for k in range(len(_baseline.columns)))
            sql = f"INSERT INTO {_baseline.name} ({names}) VALUES ({marks})"
            for row in rows:
                async with driver.transaction():
                    await driver.execute(sql, *row)
        else:  # the pool's connections run without the driver's implicit transactions
            marks = ", ".join("?" for _ in _baseline.columns)
            sql = f"INSERT INTO {_baseline.name} ({names}) VALUES ({marks})"
            for row in rows:
                await driver.execute("BEGIN IMMEDIATE")
                await driver.execute(sql, row)
                await driver.execute("COMMIT")
        return Rate.of(n, started)


def _chain_rows(n: int) -> list[ChainRow]:
    rows, previous = [], GENESIS_HASH
    for i in range(1, n + 1):
        payload = canonicalize({"tool": "crm.lookup", "arguments": {"customer_id": f"C-{i}"}})
        row = ChainRow(
            run_id="bench",
            sequence=i,
            event_id=f"e-{i}",
            step_id=f"step-{i}",
            type="TOOL_CALL",
            payload_ref="inline",
            payload_hash=sha256_digest(payload),
            previous_hash=previous,
            hash="",
            logical_time=T0 + timedelta(seconds=i),
            recorded_at=T0,
            payload=payload,
        )
        row = dataclasses.replace(row, hash=row_hash(row, previous))
        rows.append(row)
        previous = row.hash
    return rows


def _verify_rates(n: int, rounds: int = 5) -> dict[str, Any]:
    """Events a second (CPU time) of ``verify_chain`` over ``n`` rows and of the sha256 floor
    (the two digests every row needs, of the same bytes), in interleaved rounds."""
    rows = _chain_rows(n)
    metas = [canonicalize(chain_metadata(r)) for r in rows]

    def ours() -> None:
        assert verify_chain("bench", rows, expected_head=(n, rows[-1].hash)).intact

    def floor() -> None:
        for r, meta in zip(rows, metas, strict=True):
            hashlib.sha256(r.previous_hash.encode() + meta + r.payload_hash.encode()).digest()
            hashlib.sha256(r.payload or b"").digest()

    samples = interleaved_samples(
        {"verify": ours, "floor": floor}, rounds=rounds, round_s=0.0, clock=time.process_time
    )
    verify = [n / s for s in samples["verify"]]
    floors = [n / s for s in samples["floor"]]
    return {
        "verify": statistics.median(verify),
        "verify_rounds": verify,
        "sha256_floor": statistics.median(floors),
        "floor_rounds": floors,
    }


async def _run(n: int, batch: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = await open_database(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        try:
            results["sqlite"] = await _append_rates(db, n, batch)
        finally:
            await db.dispose()
    url = await create_scratch_database(PG_ADMIN_URL, "rb_bench")
    try:
        db = await open_database(url)
        try:
            results["postgresql"] = await _append_rates(db, n, batch)
        finally:
            await db.dispose()
    finally:
        await drop_scratch_database(PG_ADMIN_URL, url)
    return results


def main(n: int = 3_000, batch: int = 100, verify_n: int = 100_000) -> dict[str, Any]:
    results = asyncio.run(_run(n, batch))
    for backend, r in results.items():
        load = machine_load()
        single, plain = r["single"], r["plain_insert"]
        s_rounds, p_rounds = Spread.of(r["single_rounds"]), Spread.of(r["plain_rounds"])
        ratios = r["single_ratios"]
        emit(
            Row(
                figure=f"ledger append, 1 writer, one commit per event ({backend}; median of "
                f"{SINGLE_ROUNDS} interleaved rounds)",
                value=f"{s_rounds.text(1, 'ev/s', 0)}, CPU {single.cpu_ms:.3f} ms/ev "
                f"({r['batched']:,.0f} ev/s in batches of {batch})",
                baseline="raw driver INSERT of an execution_events-shaped row one per "
                f"transaction {p_rounds.text(1, 'ev/s', 0)}, CPU {plain.cpu_ms:.3f} ms/ev",
                ratio=s_rounds.median / p_rounds.median,
                goal=f">= 0.5x the raw driver (rounds {ratios.low:.2f}–{ratios.high:.2f}x)",
                met=s_rounds.median >= 0.5 * p_rounds.median,
                load=load,
            )
        )
        group, each = r["concurrent_group_commit"], r["concurrent_one_commit_each"]
        g_rounds, raw_rounds = Spread.of(r["group_rounds"]), Spread.of(r["raw_rounds"])
        g_ratios = Spread.of(r["group_raw_ratios"])
        emit(
            Row(
                figure=f"ledger append, {WRITERS} writers each awaiting its append, group "
                f"commit ({backend}; median of {CONCURRENT_ROUNDS} interleaved rounds)",
                value=f"{g_rounds.text(1, 'ev/s', 0)}, CPU {group.cpu_ms:.3f} ms/ev",
                baseline=f"raw driver on {WRITERS} connections, one execution_events-shaped "
                f"row per transaction {raw_rounds.text(1, 'ev/s', 0)} (one ledger commit "
                f"each {each.per_second:,.0f} ev/s)",
                ratio=g_ratios.median,
                goal=f">= {APPEND_TARGET:,} ev/s in every round and >= 0.75x the raw driver "
                f"(rounds {g_ratios.low:.2f}–{g_ratios.high:.2f}x)",
                met=g_rounds.low >= APPEND_TARGET and g_ratios.median >= 0.75,
                load=load,
            )
        )
        behind = r["write_behind"]
        emit(
            Row(
                figure=f"recording, {WRITERS} write-behind recorders, drained at the end "
                f"({backend}; not the row above: appends not awaited one by one)",
                value=f"{behind.per_second:,.0f} ev/s, CPU {behind.cpu_ms:.3f} ms/ev",
                baseline=f"{WRITERS} writers awaiting each append {group.per_second:,.0f} ev/s",
                ratio=behind.per_second / group.per_second,
                goal="—",
                met=None,
                load=load,
            )
        )
    results = {  # JSON-ready (bench-results.json)
        backend: {k: dataclasses.asdict(v) if isinstance(v, Rate) else v for k, v in r.items()}
        for backend, r in results.items()
    }
    verify = _verify_rates(verify_n)
    results["verify"] = verify
    v_rounds, f_rounds = Spread.of(verify["verify_rounds"]), Spread.of(verify["floor_rounds"])
    emit(
        Row(
            figure=(
                f"chain verification in memory ({verify_n:,} events, CPU time; median of "
                f"{len(verify['verify_rounds'])} interleaved rounds)"
            ),
            value=f"{verify['verify']:,.0f} ev/s ({v_rounds.low:,.0f}–{v_rounds.high:,.0f})",
            baseline=(
                f"sha256 of the same bytes {verify['sha256_floor']:,.0f} ev/s "
                f"({f_rounds.low:,.0f}–{f_rounds.high:,.0f})"
            ),
            ratio=verify["verify"] / verify["sha256_floor"],
            goal=f">= {VERIFY_TARGET:,} ev/s (rounds {min(verify['verify_rounds']):,.0f}+)",
            met=verify["verify"] >= VERIFY_TARGET,
            load=machine_load(),
        )
    )
    return results


if __name__ == "__main__":
    main()
