"""Benchmark: OTLP/HTTP intake, ``python -m bench.otlp``.

Two servers run side by side, each a uvicorn process: the API (``python -m api`` over SQLite
in a temporary home) and a trivial FastAPI app that only parses the protobuf export and
answers (``trivial_app`` below). Both get the same exports, built once before the rounds
(protobuf ``ExportTraceServiceRequest`` of 512 spans, the batch span processor's default
size: 64 traces' 8 child GenAI spans, chat spans with their messages, tool spans), sent by
``SENDERS`` concurrent senders of precomputed bytes (the client's own CPU is reported: it is
not the bottleneck), in interleaved rounds; the figure is the median of the rounds.

Row 1, intake: spans stored durably (the 200 means the export is in the database) per second,
the acknowledged rate; the server CPU per span counts the indexing the receiver does after the
answers too (each round waits until the server's CPU stays still). The roots are held back in
these rounds, so no trace completes and this is the receiver's own path, not assembly. Row 2, end to end: the held-back roots of ``ASSEMBLED_TRACES`` traces
are sent and the time until every run is written is measured (assembly runs after the
answer, in the API process): spans turned into runs per second.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from bench.bench_ingest import _cpu_seconds, _free_port, _server
from bench.common import Row, emit, machine_load

SENDERS = 4
TRACES_PER_EXPORT = 64
SPANS_PER_TRACE = 8
ASSEMBLED_TRACES = 128
#: after a round, at least the receiver's indexing delay (ingest.otlp_receiver.INDEX_DELAY)
SETTLE_SECONDS = 1.2
TOKEN = "bench-token"
PROTOBUF = "application/x-protobuf"

trivial_app = FastAPI()


@trivial_app.post("/v1/traces")
async def trivial_traces(request: Request) -> Response:
    """The baseline: parse the export, count its spans, answer; store nothing."""
    export = ExportTraceServiceRequest.FromString(await request.body())
    sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
    return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)


@trivial_app.post("/api/runs")
async def started() -> dict[str, str]:
    """What ``bench.bench_ingest._server`` polls to see the server is up."""
    return {}


def _attr(span: Span, key: str, value: str | int) -> None:
    kv = span.attributes.add(key=key)
    if isinstance(value, int):
        kv.value.int_value = value
    else:
        kv.value.string_value = value


def _trace(resource: ResourceSpans, n: int) -> Span:
    """One agent trace's children into ``resource``; returns its root (not added)."""
    trace_id, root_id = os.urandom(16), os.urandom(8)
    scope = resource.scope_spans[0]
    start = time.time_ns()
    for k in range(SPANS_PER_TRACE):
        span = scope.spans.add(
            trace_id=trace_id,
            span_id=os.urandom(8),
            parent_span_id=root_id,
            start_time_unix_nano=start + k * 1000,
            end_time_unix_nano=start + k * 1000 + 500,
        )
        if k % 2 == 0:
            span.name = "chat smollm2"
            _attr(span, "gen_ai.operation.name", "chat")
            _attr(span, "gen_ai.request.model", "smollm2-135m")
            _attr(
                span,
                "gen_ai.input.messages",
                '[{"role":"system","parts":[{"type":"text","content":"You are support."}]},'
                f'{{"role":"user","parts":[{{"type":"text","content":"refund order {n}"}}]}}]',
            )
            _attr(
                span,
                "gen_ai.output.messages",
                '[{"role":"assistant","parts":[{"type":"text","content":"Looking it up."}]}]',
            )
            _attr(span, "gen_ai.usage.input_tokens", 40)
            _attr(span, "gen_ai.usage.output_tokens", 6)
        else:
            span.name = "execute_tool lookup_order"
            _attr(span, "gen_ai.operation.name", "execute_tool")
            _attr(span, "gen_ai.tool.name", "lookup_order")
            _attr(span, "gen_ai.tool.call.arguments", f'{{"order_id":"{n}"}}')
            _attr(span, "gen_ai.tool.call.result", f"order {n}: 10 EUR")
    root = Span(
        trace_id=trace_id,
        span_id=root_id,
        name="invoke_agent support",
        start_time_unix_nano=start,
        end_time_unix_nano=start + (SPANS_PER_TRACE + 1) * 1000,
    )
    _attr(root, "gen_ai.operation.name", "invoke_agent")
    _attr(root, "gen_ai.agent.name", "support")
    return root


def _exports(count: int) -> tuple[list[bytes], list[Span]]:
    """``count`` exports of the traces' children (512 spans each) and the held-back roots."""
    bodies, roots = [], []
    for e in range(count):
        request = ExportTraceServiceRequest()
        resource = request.resource_spans.add()
        resource.resource.attributes.add(key="service.name").value.string_value = "bench"
        resource.scope_spans.add().scope.name = "bench"
        for t in range(TRACES_PER_EXPORT):
            roots.append(_trace(resource, e * TRACES_PER_EXPORT + t))
        bodies.append(request.SerializeToString())
    return bodies, roots


def _roots_export(roots: list[Span]) -> bytes:
    request = ExportTraceServiceRequest()
    resource = request.resource_spans.add()
    resource.resource.attributes.add(key="service.name").value.string_value = "bench"
    resource.scope_spans.add().spans.extend(roots)
    return request.SerializeToString()


@dataclass
class _Round:
    spans_per_second: float
    server_cpu_per_span: float
    client_cpu_share: float


async def _send_all(url: str, bodies: list[bytes]) -> int:
    """Send every body from ``SENDERS`` concurrent senders; the spans acknowledged."""
    queue = list(reversed(bodies))
    headers = {"content-type": PROTOBUF, "Authorization": f"Bearer {TOKEN}"}
    limits = httpx.Limits(max_connections=SENDERS)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def sender() -> None:
            while queue:
                answer = await client.post(f"{url}/v1/traces", content=queue.pop(), headers=headers)
                if answer.status_code != 200:
                    raise RuntimeError(f"{answer.status_code} {answer.text[:200]}")

        await asyncio.gather(*(sender() for _ in range(SENDERS)))
    return len(bodies) * TRACES_PER_EXPORT * SPANS_PER_TRACE


async def _round(url: str, pid: int, bodies: list[bytes]) -> _Round:
    """Spans acknowledged per second; the server's CPU per span including the work it does
    after the answers (indexing the stored exports), waited for until its CPU stays still."""
    cpu_before, client_before = _cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    spans = await _send_all(url, bodies)
    elapsed = time.perf_counter() - started
    client_share = (time.process_time() - client_before) / elapsed
    await asyncio.sleep(SETTLE_SECONDS)
    cpu = _cpu_seconds(pid)
    while True:  # the server is still working off the round: wait for its CPU to stay still
        await asyncio.sleep(0.2)
        before, cpu = cpu, _cpu_seconds(pid)
        if cpu - before <= 0.01:
            break
    return _Round(spans / elapsed, (cpu - cpu_before) / spans, client_share)


async def _assembly(url: str, roots: list[Span]) -> float:
    """Seconds from sending the roots of ``roots``' traces to all their runs written."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    wanted = {f"otlp-{r.trace_id.hex()}" for r in roots}
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as client:
        answer = await client.post(
            f"{url}/v1/traces",
            content=_roots_export(roots),
            headers={"content-type": PROTOBUF, **headers},
        )
        answer.raise_for_status()
        while True:
            listed = await client.get(f"{url}/api/runs?limit=1000", headers=headers)
            done = {r["run_id"] for r in listed.json()["runs"] if r["status"] == "COMPLETED"}
            if wanted <= done:
                return time.perf_counter() - started
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"{len(wanted - done)} runs not assembled in 600 s")
            await asyncio.sleep(0.05)


async def _run(rounds: int, exports_per_round: int) -> dict[str, Any]:
    bodies, roots = _exports(exports_per_round * (rounds + 1))
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")}
        env |= {
            "REPLAYBOOK_HOME": home,
            "REPLAYBOOK_API_TOKENS": f"{TOKEN}=engineer@bench",
            "REPLAYBOOK_LOG_FORMAT": "json",
            # no idle trace is swept during the rounds: the intake path alone is measured
            "REPLAYBOOK_OTLP_IDLE_SECONDS": "3600",
        }
        ours_port, trivial_port = _free_port(), _free_port()
        ours_argv = [sys.executable, "-m", "api", "--port", str(ours_port)]
        trivial_argv = [
            *(sys.executable, "-m", "uvicorn", "bench.otlp:trivial_app"),
            *("--port", str(trivial_port), "--log-level", "warning", "--no-access-log"),
        ]
        async with (
            _server(ours_argv, env, ours_port) as ours,
            _server(trivial_argv, env, trivial_port) as trivial,
        ):
            samples: dict[str, list[_Round]] = {"ours": [], "trivial": []}
            warm = bodies[:exports_per_round]
            await _send_all(ours.url, warm)
            await _send_all(trivial.url, warm)
            for r in range(rounds):
                batch = bodies[(r + 1) * exports_per_round : (r + 2) * exports_per_round]
                order = [("ours", ours), ("trivial", trivial)]
                for name, served in order if r % 2 == 0 else reversed(order):
                    samples[name].append(await _round(served.url, served.pid, batch))
            assembly_seconds = await _assembly(ours.url, roots[-ASSEMBLED_TRACES:])
    return {name: _summary(values) for name, values in samples.items()} | {
        "assembly_seconds": assembly_seconds,
        "rounds": rounds,
        "spans_per_round": exports_per_round * TRACES_PER_EXPORT * SPANS_PER_TRACE,
    }


def _summary(rounds: list[_Round]) -> dict[str, float]:
    rates = [r.spans_per_second for r in rounds]
    return {
        "rate": statistics.median(rates),
        "low": min(rates),
        "high": max(rates),
        "cpu": statistics.median(r.server_cpu_per_span for r in rounds),
        "client": max(r.client_cpu_share for r in rounds),
    }


def main(rounds: int = 5, exports_per_round: int = 16) -> dict[str, Any]:
    r = asyncio.run(_run(rounds, exports_per_round))
    ours, trivial = r["ours"], r["trivial"]
    load = machine_load()
    emit(
        Row(
            figure=(
                f"OTLP intake (protobuf exports of {TRACES_PER_EXPORT * SPANS_PER_TRACE} GenAI "
                f"spans, {SENDERS} senders, SQLite; stored before the answer; "
                f"median of {r['rounds']} rounds of {r['spans_per_round']:,} spans)"
            ),
            value=(
                f"{ours['rate']:,.0f} spans/s ({ours['low']:,.0f}–{ours['high']:,.0f}); "
                f"server CPU {ours['cpu'] * 1e6:,.1f} µs/span (with the indexing after the "
                f"answers); client CPU ≤ "
                f"{ours['client']:.0%} of a core"
            ),
            baseline=(
                f"trivial FastAPI app that only parses the protobuf {trivial['rate']:,.0f} "
                f"spans/s ({trivial['low']:,.0f}–{trivial['high']:,.0f}); server CPU "
                f"{trivial['cpu'] * 1e6:,.1f} µs/span"
            ),
            ratio=ours["rate"] / trivial["rate"],
            goal=">= 50% of the trivial app",
            met=ours["rate"] >= 0.5 * trivial["rate"],
            load=load,
        )
    )
    spans = ASSEMBLED_TRACES * (SPANS_PER_TRACE + 1)
    emit(
        Row(
            figure=f"OTLP assembly: {ASSEMBLED_TRACES} traces of {SPANS_PER_TRACE + 1} spans into runs",
            value=(
                f"{spans / r['assembly_seconds']:,.0f} spans/s "
                f"({ASSEMBLED_TRACES / r['assembly_seconds']:,.1f} runs/s, after the answer)"
            ),
            baseline="—",
            ratio=None,
            goal="— (runs are written off the request's path)",
            met=None,
            load=load,
        )
    )
    return r


if __name__ == "__main__":
    main()
