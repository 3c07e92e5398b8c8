"""The OTLP receiver's staging and assembly over the real stores (SQLite and PostgreSQL),
with a clock the test moves: a trace waits for its parents, an idle one is finished and
marked, a claim left by a dead assembler is taken over with the same run, late spans are
kept apart, and a trace that cannot be converted is marked failed with its spans kept."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from ingest.otlp_decode import staged_export
from ingest.otlp_receiver import TraceAssembler, run_id_of
from runtime.ports import StagedExport
from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.otlp_spans import SqlOtlpSpans

pytestmark = pytest.mark.asyncio(loop_scope="session")
T0 = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def _export(trace_id: bytes, *spans: tuple[bytes, bytes, dict[str, str | int]]) -> StagedExport:
    """The export of ``spans`` (span id, parent id, attributes) of one trace, to stage."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for n, (span_id, parent, attrs) in enumerate(spans):
        span = Span(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name=str(attrs.get("gen_ai.operation.name", "db.query")),
            start_time_unix_nano=1_700_000_000_000_000_000 + n,
            end_time_unix_nano=1_700_000_000_000_000_100 + n,
        )
        for key, value in attrs.items():
            kv = span.attributes.add(key=key)
            if isinstance(value, int):
                kv.value.int_value = value
            else:
                kv.value.string_value = value
        scope.spans.append(span)
    return staged_export(request, request.SerializeToString())


CHAT: dict[str, str | int] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "m",
    "gen_ai.usage.input_tokens": 3,
}


@pytest.fixture
def assembler(database: Database, tmp_path: Path) -> TraceAssembler:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    return TraceAssembler(
        SqlOtlpSpans(database),
        SqlLedger(database, artifacts),
        artifacts,
        SqlEvidenceReader(database),
        idle_seconds=60,
        claim_lease_seconds=30,
        clock=Clock(),
    )


def _clock(assembler: TraceAssembler) -> Clock:
    assert isinstance(assembler.clock, Clock)
    return assembler.clock


async def test_a_trace_waits_for_a_missing_parent_then_the_idle_sweep_ends_it(
    assembler: TraceAssembler,
) -> None:
    store, clock = assembler.store, _clock(assembler)
    trace, root, middle, leaf = os.urandom(16), os.urandom(8), os.urandom(8), os.urandom(8)
    # the root and a grandchild arrive; the span between them does not
    export = _export(trace, (root, b"", {}), (leaf, middle, CHAT))
    outcome = await store.stage(export, T0)
    assert outcome.pending == 2 and outcome.rooted == (trace.hex(),)  # stored, not indexed
    assert (await store.stage(export, T0)).duplicates == 2  # the same export: stored once
    assert (await store.stage(_export(trace, (leaf, middle, CHAT)), T0)).pending == 1
    indexed = await store.index()
    assert (indexed.accepted, indexed.duplicates) == (2, 1)  # the leaf re-sent: once
    assert await assembler.assemble(trace.hex()) is None  # a parent is missing: not yet
    clock.now = T0 + timedelta(seconds=30)
    assert await assembler.sweep() == []  # not idle yet
    clock.now = T0 + timedelta(seconds=61)
    assert await assembler.sweep() == [run_id_of(trace.hex())]
    run = await assembler.ledger.get_run(run_id_of(trace.hex()))
    assert run.labels["ended_by"] == "idle_timeout" and run.status.value == "COMPLETED"
    assert (await assembler.ledger.verify(run.run_id)).intact
    # the missing span, now: kept apart as late, the run unchanged
    late = await store.stage(_export(trace, (middle, root, {})), clock.now)
    assert late.late == 1 and late.late_traces == {trace.hex(): run.run_id}
    assert [e.span_ids for e in await store.exports(trace.hex())] == [{root.hex(), leaf.hex()}]


async def test_a_claim_left_by_a_dead_assembler_is_taken_over(assembler: TraceAssembler) -> None:
    store, clock = assembler.store, _clock(assembler)
    trace, root = os.urandom(16), os.urandom(8)
    await store.stage(_export(trace, (root, b"", {}), (os.urandom(8), root, CHAT)), T0)
    # an assembler claimed it (as an idle trace) and died before writing the run
    assert await store.claim(trace.hex(), "idle_timeout", T0, T0) == "idle_timeout"
    assert await assembler.assemble(trace.hex()) is None  # claimed: not twice at once
    clock.now = T0 + timedelta(seconds=31)
    assert await assembler.sweep() == [run_id_of(trace.hex())]
    run = await assembler.ledger.get_run(run_id_of(trace.hex()))
    assert run.labels["ended_by"] == "idle_timeout"  # how the first claim ended it
    assert (await store.state(trace.hex()) or {})["state"] == "assembled"
    assert await assembler.sweep() == []  # nothing left to do


async def test_a_trace_that_cannot_be_converted_is_marked_failed(
    assembler: TraceAssembler,
) -> None:
    store = assembler.store
    trace, root = os.urandom(16), os.urandom(8)
    bad: dict[str, str | int] = {**CHAT, "gen_ai.usage.input_tokens": -3}
    await store.stage(_export(trace, (root, b"", {}), (os.urandom(8), root, bad)), T0)
    assert await assembler.assemble(trace.hex()) is None
    state = await store.state(trace.hex())
    assert state is not None and state["state"] == "failed"
    assert "gen_ai.usage.input_tokens" in state["error"]
    assert len(await store.exports(trace.hex())) == 1  # the spans stay staged


async def test_a_claim_indexes_what_was_acknowledged_before_it(assembler: TraceAssembler) -> None:
    """Exports are indexed after their answer; a claim indexes them first, so every span
    acknowledged before the claim is in the run, and one acknowledged after it is late."""
    store = assembler.store
    trace, root, child, after = os.urandom(16), os.urandom(8), os.urandom(8), os.urandom(8)
    assert (await store.stage(_export(trace, (root, b"", {})), T0)).pending == 1
    assert (await store.stage(_export(trace, (child, root, CHAT)), T0)).pending == 1
    assert await store.claim(trace.hex(), "root_span", T0, T0) == "root_span"  # not indexed yet
    assert {i for e in await store.exports(trace.hex()) for i in e.span_ids} == {
        root.hex(),
        child.hex(),
    }
    late = await store.stage(_export(trace, (after, root, CHAT)), T0)  # indexed at once
    assert (late.late, late.pending, late.late_traces) == (1, 0, {trace.hex(): None})
