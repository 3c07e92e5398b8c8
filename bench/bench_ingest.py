"""Benchmark: HTTP ingestion, ``python -m bench.bench_ingest``.

Two servers run side by side on this machine, each a uvicorn process: the API (``python -m
api``, over SQLite in a temporary home) and a trivial FastAPI app with the same two routes
that stores nothing (``bench.trivial_ingest_app``). 8 clients each send a run's header and a
batch of 4 events, again and again, in interleaved rounds against one server then the other;
the figure is the median request rate (and the p99 latency) of the rounds. A second row sends
300 batches of 4 events to ONE run and compares the latency (and the server's CPU time) of the
last 30 batches with the first 30. Every batch is the same size (two user lines, two model
calls that send no ``messages``: their context is the conversation as recorded), so what
grows is only the run behind it: ingestion keeps the run's state and records a model call's
context as the messages after the last call's, so the ratio stays about 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import Row, emit, machine_load

CLIENTS = 8
#: batches at each end of the long run that are compared
_EDGE = 30
TOKEN = "bench-token"
START = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its threads so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class _Served:
    url: str
    pid: int


@contextlib.asynccontextmanager
async def _server(argv: list[str], env: dict[str, str], port: int) -> AsyncIterator[_Served]:
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient() as client:
            while True:
                try:
                    await client.post(f"{url}/api/runs", content=b"{}")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or process.returncode is not None:
                        raise RuntimeError(f"{argv} did not start serving") from None
                    await asyncio.sleep(0.2)
        yield _Served(url, process.pid)
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


def _header(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "started_at": START.isoformat(), "labels": {"bench": "ingest"}}


def _events(first: int, count: int = 4) -> dict[str, Any]:
    events = []
    for sequence in range(first, first + count):
        at = (START + timedelta(seconds=sequence)).isoformat()
        if sequence % 2:
            events.append(
                {"type": "user_message", "content": f"line {sequence}", "done": False}
                | {"sequence": sequence, "at": at}
            )
        else:
            events.append(
                {
                    "type": "model_call",
                    "model": "m-1",
                    "content": f"answer {sequence}",
                    "tool_calls": [],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                    "sequence": sequence,
                    "at": at,
                }
            )
    return {"events": events}


async def _round(url: str, runs_per_client: int) -> tuple[float, list[float]]:
    """Requests per second of ``CLIENTS`` clients, each sending header + 4 events per run."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def client_loop(client: httpx.AsyncClient) -> None:
        for _ in range(runs_per_client):
            run_id = f"bench-{uuid.uuid4().hex[:12]}"
            for path, body in (
                (f"{url}/api/runs", _header(run_id)),
                (f"{url}/api/runs/{run_id}/events", _events(1)),
            ):
                started = time.perf_counter()
                answer = await client.post(path, json=body, headers=headers)
                latencies.append(time.perf_counter() - started)
                if answer.status_code not in (200, 201):
                    raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:200]}")

    limits = httpx.Limits(max_connections=CLIENTS)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        started = time.perf_counter()
        await asyncio.gather(*(client_loop(client) for _ in range(CLIENTS)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def _long_run(served: _Served, batches: int) -> tuple[list[float], float, float]:
    """Latency of each of ``batches`` batches of 4 events sent to one run, and the server's
    CPU seconds a batch over the first and over the last ``_EDGE`` batches."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    run_id = f"bench-long-{uuid.uuid4().hex[:8]}"
    out = []
    cpu_first = cpu_last = 0.0
    async with httpx.AsyncClient(timeout=60) as client:
        answer = await client.post(f"{served.url}/api/runs", json=_header(run_id), headers=headers)
        answer.raise_for_status()
        for b in range(batches):
            if b in (0, batches - _EDGE):
                cpu_before = _cpu_seconds(served.pid)
            started = time.perf_counter()
            answer = await client.post(
                f"{served.url}/api/runs/{run_id}/events", json=_events(1 + 4 * b), headers=headers
            )
            out.append(time.perf_counter() - started)
            answer.raise_for_status()
            if b == _EDGE - 1:
                cpu_first = (_cpu_seconds(served.pid) - cpu_before) / _EDGE
            if b == batches - 1:
                cpu_last = (_cpu_seconds(served.pid) - cpu_before) / _EDGE
    return out, cpu_first, cpu_last


def _p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


async def _run(rounds: int, runs_per_client: int, batches: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")}
        env |= {
            "REPLAYBOOK_HOME": home,
            "REPLAYBOOK_API_TOKENS": f"{TOKEN}=engineer@bench",
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
        ours_port, trivial_port = _free_port(), _free_port()
        ours_argv = [sys.executable, "-m", "api", "--port", str(ours_port)]
        trivial_argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.trivial_ingest_app:app",
            "--port",
            str(trivial_port),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        async with (
            _server(ours_argv, env, ours_port) as ours,
            _server(trivial_argv, env, trivial_port) as trivial,
        ):
            samples: dict[str, list[float]] = {"ours": [], "trivial": []}
            cpu: dict[str, list[float]] = {"ours": [], "trivial": []}
            latencies: dict[str, list[float]] = {"ours": [], "trivial": []}
            await _round(ours.url, 1)  # warm up both (stores opened, imports done)
            await _round(trivial.url, 1)
            for r in range(rounds):
                order = [("ours", ours), ("trivial", trivial)]
                for name, served in order if r % 2 == 0 else reversed(order):
                    before = _cpu_seconds(served.pid)
                    rate, lat = await _round(served.url, runs_per_client)
                    cpu[name].append((_cpu_seconds(served.pid) - before) / len(lat))
                    samples[name].append(rate)
                    latencies[name].extend(lat)
            long_run, cpu_first, cpu_last = await _long_run(ours, batches)
    return {
        "ours": statistics.median(samples["ours"]),
        "trivial": statistics.median(samples["trivial"]),
        "ours_p99": _p99(latencies["ours"]),
        "trivial_p99": _p99(latencies["trivial"]),
        "ours_cpu": statistics.median(cpu["ours"]),
        "trivial_cpu": statistics.median(cpu["trivial"]),
        "first_batches": statistics.median(long_run[:_EDGE]),
        "last_batches": statistics.median(long_run[-_EDGE:]),
        "first_batches_cpu": cpu_first,
        "last_batches_cpu": cpu_last,
        "batches": batches,
    }


def main(rounds: int = 5, runs_per_client: int = 10, batches: int = 300) -> dict[str, Any]:
    r = asyncio.run(_run(rounds, runs_per_client, batches))
    load = machine_load()
    emit(
        Row(
            figure=f"HTTP ingestion (header + 4 events, {CLIENTS} clients, SQLite)",
            value=f"{r['ours']:,.0f} req/s, p99 {r['ours_p99'] * 1000:,.0f} ms",
            baseline=(
                f"trivial FastAPI app with the same routes {r['trivial']:,.0f} req/s, "
                f"p99 {r['trivial_p99'] * 1000:,.0f} ms"
            ),
            ratio=r["ours"] / r["trivial"],
            goal=">= 50% of the trivial app",
            met=r["ours"] >= 0.5 * r["trivial"],
            load=load,
        )
    )
    emit(
        Row(
            figure="HTTP ingestion: server CPU per request (the same rounds)",
            value=f"{r['ours_cpu'] * 1000:,.2f} ms",
            baseline=f"trivial FastAPI app {r['trivial_cpu'] * 1000:,.2f} ms",
            ratio=r["ours_cpu"] / r["trivial_cpu"],
            goal="— (what the request rate costs; less noisy on a shared machine)",
            met=None,
            load=load,
        )
    )
    emit(
        Row(
            figure=(
                f"HTTP ingestion: batch of 4 events at events {4 * (r['batches'] - _EDGE)}+ "
                "of one run (every batch the same size)"
            ),
            value=(
                f"{r['last_batches'] * 1000:,.1f} ms (median of the last {_EDGE} batches; "
                f"server CPU {r['last_batches_cpu'] * 1000:,.2f} ms a batch)"
            ),
            baseline=(
                f"the first {_EDGE} batches {r['first_batches'] * 1000:,.1f} ms "
                f"(server CPU {r['first_batches_cpu'] * 1000:,.2f} ms a batch)"
            ),
            ratio=r["last_batches"] / r["first_batches"],
            goal="per-batch cost independent of run length (ratio ~1)",
            met=r["last_batches"] <= 1.5 * r["first_batches"],
            load=load,
        )
    )
    return r


if __name__ == "__main__":
    main()
