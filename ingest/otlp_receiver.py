"""Traces received over OTLP/HTTP → runs, one per trace, assembled from the staged spans.

An export is stored on arrival (``OtlpSpanStore.stage``: one row) and answered; its spans are
indexed by trace and span id, each once, soon after (``OtlpSpanStore.index``, called by the
``AssemblyLoop`` within ``INDEX_DELAY``, before an assembly and at every sweep) and decoded
only here, off the request's path. A trace is assembled into the run ``otlp-<trace id>``:

* when its root span (no parent) has arrived and every parent a span names is there —
  OpenTelemetry exports a span when it ends, and a root ends after its children;
* or, when no span of it arrived for ``idle_seconds`` (a root that never ended, an exporter
  that died), from what is there, marked ``ended_by: idle_timeout`` (label and the run's
  ``source_outcome``).

Assembly claims the trace first (its span set is frozen from then on; spans arriving later
are kept in the staging table as ``late``, not part of the run, and refused in the export's
answer as a partial success naming the run), converts the spans with the file importers'
code (``ingest.openinference`` rewrites OpenInference spans to GenAI ones, ``ingest.otel``
orders them and converts) and records the run through the one ingestion path. Every step is
idempotent: an assembler that died after its claim is replaced after ``claim_lease_seconds``
and records the same run (the same spans give the same header and events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from prometheus_client import Counter

from ingest.import_common import ConvertedRun, ImportReport, record_converted
from ingest.openinference import normalised_spans
from ingest.otel import RunNaming, convert_trace
from ingest.otlp_decode import StagedSpan, span_dict, spans_of
from models.errors import ConflictError, InvalidInputError, ReplaybookError
from runtime.ports import ArtifactStore, EvidenceReader, IngestLedger, OtlpSpanStore, StageOutcome

log = structlog.get_logger(__name__)

RUN_PREFIX = "otlp-"
ROOT_SPAN, IDLE_TIMEOUT = "root_span", "idle_timeout"
ASSEMBLED, FAILED = "assembled", "failed"
DEFAULT_IDLE_SECONDS = 300.0
#: how long a stored export may wait to be indexed (exports stored meanwhile are indexed in
#: the same transaction)
INDEX_DELAY = 1.0

OPAQUE_SPANS_TOTAL = Counter(
    "replaybook_otlp_opaque_spans",
    "Spans of assembled OTLP traces that were not interpreted (kept as OPAQUE events).",
)
TRACES_TOTAL = Counter(
    "replaybook_otlp_traces",
    "OTLP traces assembled into runs, by how they ended (root_span, idle_timeout) or "
    "failed (spans that cannot be converted; they stay staged).",
    ["result"],
)


def run_id_of(trace_id: str) -> str:
    """The run a trace becomes: ``otlp-`` and the trace id in lower-case hex (32 digits)."""
    return f"{RUN_PREFIX}{trace_id.lower()}"


def late_message(outcome: StageOutcome) -> str:
    """The partial-success message of an export with late spans, naming their runs."""
    runs = ", ".join(
        sorted(
            run or f"{run_id_of(trace)} (being assembled)"
            for trace, run in outcome.late_traces.items()
        )
    )
    return (
        f"{outcome.late} span(s) arrived after their trace was assembled into run(s) {runs}: "
        "kept, not added to the run"
    )


def is_complete(spans: Sequence[StagedSpan]) -> bool:
    """A root span arrived and every parent named by a span is there."""
    ids = {s.span_id for s in spans}
    return any(s.parent_span_id is None for s in spans) and all(
        s.parent_span_id is None or s.parent_span_id in ids for s in spans
    )


def convert_staged(trace_id: str, spans: Sequence[StagedSpan], ended_by: str) -> ConvertedRun:
    """The run of a trace's staged spans (GenAI and OpenInference spans alike)."""
    dicts = normalised_spans([span_dict(s) for s in spans])
    # the SDK's default name for a resource that names none says nothing
    services = sorted({s.service for s in spans if s.service} - {"unknown_service:python"})
    labels = {"ended_by": ended_by, **({"service": services[0]} if services else {})}
    naming = RunNaming(
        run_id=run_id_of(trace_id),
        source="otlp",
        labels=labels,
        end_outcome={"ended_by": IDLE_TIMEOUT} if ended_by == IDLE_TIMEOUT else None,
    )
    declared = [s.write_tools for s in spans if s.write_tools is not None]
    writes = frozenset(n for d in declared for n in d.split(",") if n) if declared else None
    return convert_trace(dicts, f"trace {trace_id}", writes, naming)


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class TraceAssembler:
    """Assembles staged traces into runs (see the module docstring)."""

    store: OtlpSpanStore
    ledger: IngestLedger
    artifacts: ArtifactStore
    evidence: EvidenceReader
    idle_seconds: float = DEFAULT_IDLE_SECONDS
    #: how long a claim may stay unfinished before another assembler takes the trace over
    claim_lease_seconds: float = 60.0
    clock: Callable[[], datetime] = _utcnow

    async def assemble(self, trace_id: str, reason: str = "rooted") -> str | None:
        """Assemble the trace when ``reason`` allows (``rooted``: only if complete; ``idle``:
        as it is; ``stale``: a claim left unfinished). The run id, or None when not now."""
        now = self.clock()
        if reason == "rooted":
            await self.store.index()  # the exports acknowledged so far
        if reason == "rooted" and not is_complete(await self._spans(trace_id)):
            return None  # a parent is still missing: a later span or the idle sweep ends it
        ended_by = await self.store.claim(
            trace_id,
            IDLE_TIMEOUT if reason == "idle" else ROOT_SPAN,
            now,
            now - timedelta(seconds=self.claim_lease_seconds),
        )
        if ended_by is None:
            return None  # another assembler has it, or it is done
        spans = await self._spans(trace_id)
        try:
            run = convert_staged(trace_id, spans, ended_by)
            report = await record_converted(
                self.ledger, self.artifacts, self.evidence, [run], ImportReport(trace_id)
            )
        except (InvalidInputError, ConflictError) as exc:
            # the spans stay staged; the trace is not retried (the same spans fail the same way)
            await self.store.finish(trace_id, FAILED, None, str(exc))
            TRACES_TOTAL.labels(FAILED).inc()
            log.warning("otlp trace not assembled", trace_id=trace_id, error=str(exc))
            return None
        await self.store.finish(trace_id, ASSEMBLED, run.header.run_id)
        TRACES_TOTAL.labels(ended_by).inc()
        OPAQUE_SPANS_TOTAL.inc(len(run.opaque))
        log.info(
            "otlp trace assembled",
            trace_id=trace_id,
            run_id=run.header.run_id,
            spans=len(spans),
            opaque=len(run.opaque),
            ended_by=ended_by,
            events=report.events_recorded,
        )
        return run.header.run_id

    async def _spans(self, trace_id: str) -> list[StagedSpan]:
        return spans_of(trace_id, await self.store.exports(trace_id))

    async def sweep(self) -> list[str]:
        """Assemble what is due: complete traces not assembled yet, idle ones, stale claims."""
        await self.store.index()  # a trace's last span may be in an export not indexed yet
        now = self.clock()
        due = await self.store.due(
            now - timedelta(seconds=self.idle_seconds),
            now - timedelta(seconds=self.claim_lease_seconds),
        )
        runs = []
        for trace_id, reason in due:
            run_id = await self.assemble(trace_id, reason)
            if run_id is not None:
                runs.append(run_id)
        return runs


class AssemblyLoop:
    """One background task per process: assembles the traces an export completed (soon after
    the answer, off the request's path) and sweeps every ``interval`` seconds, so an idle trace
    is finished and a trace a stopped process left is picked up after a restart."""

    def __init__(self, assembler: Callable[[], Awaitable[TraceAssembler]], interval: float) -> None:
        self._assembler = assembler
        self.interval = interval
        self._pending: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: when the exports stored since the last indexing are indexed (loop time)
        self._index_at: float | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="otlp-assembly")

    def notify(self, trace_ids: Iterable[str], stored: bool = False) -> None:
        """Traces whose root arrived: assemble them soon; ``stored``: an export waits to be
        indexed (within ``INDEX_DELAY`` seconds, with those stored meanwhile)."""
        for trace_id in trace_ids:
            self._pending[trace_id] = None
        if stored and self._index_at is None:
            self._index_at = asyncio.get_running_loop().time() + INDEX_DELAY
            self._wake.set()
        if self._pending:
            self._wake.set()
        if self._wake.is_set():
            self.start()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            wake_at = min(next_sweep, self._index_at or next_sweep)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - loop.time())):
                    await self._wake.wait()
            self._wake.clear()
            if not self._pending and loop.time() < min(next_sweep, self._index_at or next_sweep):
                continue  # woken to wait for a nearer time
            # both cleared first: what fails is retried by the next sweep, not at once
            index_now = self._index_at is not None and loop.time() >= self._index_at
            if index_now:
                self._index_at = None
            sweep_now = loop.time() >= next_sweep
            if sweep_now:
                next_sweep = loop.time() + self.interval
            try:
                assembler = await self._assembler()
                if index_now:
                    await assembler.store.index()
                while self._pending:
                    trace_id = next(iter(self._pending))
                    del self._pending[trace_id]
                    await assembler.assemble(trace_id)
                if sweep_now:
                    await assembler.sweep()
            except ReplaybookError as exc:  # a store that is down: the next sweep retries
                log.warning("otlp assembly failed; retried at the next sweep", error=str(exc))
            except Exception:
                log.exception("otlp assembly failed; retried at the next sweep")


def sweep_interval(idle_seconds: float) -> float:
    """A quarter of the idle timeout, between 0.05 and 30 seconds."""
    return min(30.0, max(0.05, idle_seconds / 4))
