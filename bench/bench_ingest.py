"""Benchmark: HTTP ingestion, ``python -m bench.bench_ingest``.

Two servers run side by side on this machine, each a uvicorn process: the API (``python -m
api``, over SQLite in a temporary home, default redaction ``redact-v1``) and a trivial FastAPI
app with the same two routes that parses the body and stores nothing
(``bench.trivial_ingest_app``). Both get the same requests: a run's header (a system prompt,
two tools) then one batch of 4 chat events (two user messages, two model answers: a few
hundred to 1,500 characters of chat text with accents, CJK, an emoji, quotes and new lines;
the first user message names an e-mail address and a phone number, so redaction has work),
again and again, in interleaved rounds against one server then the other.

The load generator is not the bottleneck: ``CLIENTS`` keep-alive connections over raw
sockets send HTTP/1.1 requests built before the round, and read each answer by its
Content-Length (the client's own CPU a request is printed beside the rate). The robust figure
on a shared machine is the **server's CPU time a request** (``/proc/<pid>/stat`` utime +
stime of the server process before and after a round, once its CPU stays still), median of
the rounds with their spread, against the trivial app's in the same rounds, with the share
of the server's main thread (the event loop's; the others are the stores' writer threads,
artifact files and SQLite transactions) beside it. The request
rate is printed too (it moves with the machine's load).

A last row sends ``batches`` batches of 4 events to ONE run and compares the latency (and the
server's CPU time) of the last 30 batches with the first 30: ingestion keeps the run's state,
so the ratio stays about 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
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

from bench.common import Row, Spread, emit, machine_load

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
    """User + system CPU time of process ``pid`` and its threads so far, exited threads
    included (Linux /proc; in clock ticks, 10 ms)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_seconds(pid: int) -> tuple[float, float]:
    """CPU time of the live threads of process ``pid``, and of its main thread (the event
    loop's: its task id is the process id), in nanoseconds' precision
    (``/proc/<pid>/task/*/schedstat``): a round of a few hundred requests of the trivial app
    is a few ticks of ``_cpu_seconds``."""
    total = main = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that just ended
            spent = int((task / "schedstat").read_text().split()[0])
            total += spent
            if task.name == str(pid):
                main = spent
    return total / 1e9, main / 1e9


@dataclasses.dataclass(frozen=True)
class _Cpu:
    """Both clocks of a server process at one moment."""

    ticks: float
    threads: float
    #: the main thread's (the event loop's; the rest is the store's writer threads)
    main: float

    @classmethod
    def of(cls, pid: int) -> _Cpu:
        return cls(_cpu_seconds(pid), *_thread_seconds(pid))

    def since(self, before: _Cpu) -> float:
        """CPU seconds from ``before``: the precise count, unless threads that ended in between
        took more than the tick count's resolution (their time is in the tick count only)."""
        precise, coarse = self.threads - before.threads, self.ticks - before.ticks
        return coarse if coarse - precise > 0.02 else precise


#: CPU seconds an idle server spends in 0.1 s at most (uvicorn's main loop ticks every 0.1 s)
_IDLE = 0.002


async def _settled_cpu(pid: int) -> _Cpu:
    """The server's CPU once it is idle for 0.1 s (work left after the last answer, a group
    commit or a log line, counts to the round that caused it)."""
    cpu = _Cpu.of(pid)
    for _ in range(50):
        await asyncio.sleep(0.1)
        now = _Cpu.of(pid)
        if now.threads - cpu.threads < _IDLE:
            break
        cpu = now
    return cpu


@dataclasses.dataclass
class _Served:
    url: str
    pid: int
    port: int


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
        yield _Served(url, process.pid, port)
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


# --- the payloads: chat text, not the bench's own document ----------------------------------

_SYSTEM = (
    "You are the support assistant of Nordlicht Outdoor GmbH. Answer in the customer's "
    "language; be precise about orders, refunds and delivery times. Never promise a refund "
    "before the order is found. Quote the order number as “#NNNNNN”. If the customer is "
    'upset, acknowledge it first ("I understand this is frustrating"). Tools: look up an '
    "order by number or e-mail; read the refund policy.\n\n"
    "Rules:\n1. Do not reveal internal notes.\n2. Prices are in EUR (€), VAT included.\n"
    "3. Für Kunden aus Deutschland gilt das 14-tägige Widerrufsrecht.\n"
    "4. 日本のお客様には英語で回答してください。\n"
)
_USER_1 = (
    "Hi, I ordered the Fjällräven Keb jacket (size M, colour “dark olive”) on 28 November "
    'and it still hasn\'t arrived. The tracking page says "label created" since Monday. '
    "My e-mail is jana.novakova@example.org and my phone is +49 151 2345 6789. Could you "
    "check what's going on? I need it before my trip to Tromsø next week 🙏"
)
_USER_2 = (
    "Thanks. If it can't arrive by Friday I'd rather cancel and get a refund — is that "
    "possible even though it has shipped? Also: the invoice shows 249,90 € but the shop "
    "said 229,90 € with the Black-Friday code ‘NORD20’."
)
_ANSWER = (
    "I understand this is frustrating, especially with your trip coming up. I found your "
    "order #{order}: the Keb jacket (M, dark olive) was packed on 29 November, but the "
    "carrier has not scanned the parcel yet — that is why the tracking page still shows "
    '"label created". This happens when a parcel misses the evening pick-up.\n\n'
    "Here is what I can do:\n"
    "1. I have asked the warehouse to re-hand the parcel to the carrier today with express "
    "delivery at no cost; it would then arrive on Thursday or Friday.\n"
    "2. If it does not arrive by Friday, you can refuse the delivery or send it back within "
    "14 days (Widerrufsrecht) and we refund the full amount, shipping included.\n\n"
    "About the price: the Black-Friday code ‘NORD20’ gives 20 € off items above 200 €, so "
    "the correct total is 229,90 €. I have opened a correction of 20,00 € for you; it "
    "appears on your card within 3–5 business days. Is there anything else I can help "
    "with? 😊"
)


def _header(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "started_at": START.isoformat(),
        "labels": {"bench": "ingest", "agent": "support-desk"},
        "system_prompt": _SYSTEM,
        "tools": [
            {
                "name": "orders.lookup",
                "description": "Find an order by number or by the customer's e-mail.",
                "parameters": {
                    "type": "object",
                    "properties": {"order": {"type": "string"}, "email": {"type": "string"}},
                },
                "side_effect_class": "READ",
            },
            {
                "name": "refund_policy.read",
                "description": "The refund policy of a country.",
                "parameters": {"type": "object", "properties": {"country": {"type": "string"}}},
                "side_effect_class": "READ",
            },
        ],
    }


def _events(first: int, count: int = 4, case: int = 0) -> dict[str, Any]:
    """``count`` chat events from sequence ``first``: a user message, then a model answer;
    ``case`` (the run's number) makes each run's text its own, as real conversations are (so
    the messages are new artifacts, not the last run's)."""
    events = []
    for sequence in range(first, first + count):
        at = (START + timedelta(seconds=sequence)).isoformat()
        if sequence % 2:
            text = _USER_1 if sequence % 4 == 1 else _USER_2
            events.append(
                {
                    "type": "user_message",
                    "content": f"{text} (case {case}-{sequence})",
                    "done": False,
                }
                | {"sequence": sequence, "at": at}
            )
        else:
            events.append(
                {
                    "type": "model_call",
                    "model": "gpt-4o-2024-08-06",
                    "content": _ANSWER.format(order=480_000 + 10 * case + sequence),
                    "tool_calls": [],
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 612 + 40 * sequence, "completion_tokens": 287},
                    "sequence": sequence,
                    "at": at,
                }
            )
    return {"events": events}


# --- the load generator: raw sockets, requests built before the round -----------------------


def _request(path: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body, ensure_ascii=False).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data


_cases = itertools.count()


def _run_requests(prefix: str) -> list[bytes]:
    """A run's two requests: its header, then its first batch of 4 events."""
    run_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
    return [
        _request("/api/runs", _header(run_id)),
        _request(f"/api/runs/{run_id}/events", _events(1, case=next(_cases))),
    ]


class _Connection:
    """One keep-alive HTTP/1.1 connection; ``send`` answers the status and the latency."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def send(self, request: bytes) -> tuple[int, float, bytes]:
        started = time.perf_counter()
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await self.reader.readexactly(length) if length else b""
        return int(head[9:12]), time.perf_counter() - started, body

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


@dataclasses.dataclass
class _Round:
    server_cpu: float  # seconds a request
    loop_cpu: float  # of which the main thread's (the event loop's)
    client_cpu: float  # seconds a request
    rate: float  # requests a second
    latencies: list[float]


async def _round(served: _Served, runs_per_client: int, label: str) -> _Round:
    """``CLIENTS`` connections, each sending ``runs_per_client`` runs (header + 4 events)."""
    work = [
        [r for _ in range(runs_per_client) for r in _run_requests(f"{label}-{c}")]
        for c in range(CLIENTS)
    ]
    connections = [await _Connection.open(served.port) for _ in range(CLIENTS)]
    latencies: list[float] = []

    async def client(connection: _Connection, requests: list[bytes]) -> None:
        for request in requests:
            status, latency, body = await connection.send(request)
            if status not in (200, 201):
                raise RuntimeError(f"{status} {body[:300]!r}")
            latencies.append(latency)

    cpu_before = await _settled_cpu(served.pid)
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(client(c, w) for c, w in zip(connections, work, strict=True)))
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_before
    settled = await _settled_cpu(served.pid)
    cpu = settled.since(cpu_before)
    loop_cpu = settled.main - cpu_before.main
    for connection in connections:
        await connection.close()
    n = len(latencies)
    return _Round(cpu / n, loop_cpu / n, client_cpu / n, n / elapsed, latencies)


async def _long_run(served: _Served, batches: int) -> tuple[list[float], float, float]:
    """Latency of each of ``batches`` batches of 4 events sent to one run, and the server's
    CPU seconds a batch over the first and over the last ``_EDGE`` batches."""
    run_id = f"bench-long-{uuid.uuid4().hex[:8]}"
    requests = [
        _request(f"/api/runs/{run_id}/events", _events(1 + 4 * b, case=b)) for b in range(batches)
    ]
    connection = await _Connection.open(served.port)
    status, _, body = await connection.send(_request("/api/runs", _header(run_id)))
    if status != 201:
        raise RuntimeError(f"{status} {body[:300]!r}")
    out = []
    cpu_first = cpu_last = 0.0
    cpu_before = _Cpu.of(served.pid)
    for b, request in enumerate(requests):
        if b in (0, batches - _EDGE):
            cpu_before = _Cpu.of(served.pid)
        status, latency, body = await connection.send(request)
        if status != 201:
            raise RuntimeError(f"batch {b}: {status} {body[:300]!r}")
        out.append(latency)
        if b == _EDGE - 1:
            cpu_first = _Cpu.of(served.pid).since(cpu_before) / _EDGE
        if b == batches - 1:
            cpu_last = _Cpu.of(served.pid).since(cpu_before) / _EDGE
    await connection.close()
    return out, cpu_first, cpu_last


def _p99(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.99) - 1)]


def _environment(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")}
    return env | {
        "REPLAYBOOK_HOME": home,
        "REPLAYBOOK_API_TOKENS": f"{TOKEN}=engineer@bench",
        "REPLAYBOOK_LOG_FORMAT": "json",
    }


def _argvs(ours_port: int, trivial_port: int) -> tuple[list[str], list[str]]:
    ours = [sys.executable, "-m", "api", "--port", str(ours_port)]
    trivial = [
        *(sys.executable, "-m", "uvicorn", "bench.trivial_ingest_app:app"),
        *("--port", str(trivial_port), "--log-level", "warning", "--no-access-log"),
    ]
    return ours, trivial


async def _run(rounds: int, runs_per_client: int, batches: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        env = _environment(home)
        ours_port, trivial_port = _free_port(), _free_port()
        ours_argv, trivial_argv = _argvs(ours_port, trivial_port)
        async with (
            _server(ours_argv, env, ours_port) as ours,
            _server(trivial_argv, env, trivial_port) as trivial,
        ):
            measured: dict[str, list[_Round]] = {"ours": [], "trivial": []}
            for name, served in (("ours", ours), ("trivial", trivial)):
                await _round(served, 2, f"warm-{name}")  # stores opened, imports done
            for r in range(rounds):
                order = [("ours", ours), ("trivial", trivial)]
                for name, served in order if r % 2 == 0 else reversed(order):
                    measured[name].append(await _round(served, runs_per_client, f"r{r}-{name}"))
            long_run, cpu_first, cpu_last = await _long_run(ours, batches)

    def spread(name: str, field: str) -> Spread:
        return Spread.of([getattr(m, field) for m in measured[name]])

    ours_cpu = [m.server_cpu for m in measured["ours"]]
    trivial_cpu = [m.server_cpu for m in measured["trivial"]]
    return {
        "rounds": rounds,
        "requests_per_round": 2 * CLIENTS * runs_per_client,
        "ours": spread("ours", "rate"),
        "trivial": spread("trivial", "rate"),
        "ours_p99": _p99([x for m in measured["ours"] for x in m.latencies]),
        "trivial_p99": _p99([x for m in measured["trivial"] for x in m.latencies]),
        "ours_cpu": spread("ours", "server_cpu"),
        "ours_loop_cpu": spread("ours", "loop_cpu"),
        "trivial_cpu": spread("trivial", "server_cpu"),
        "cpu_ratio": Spread.of([a / b for a, b in zip(ours_cpu, trivial_cpu, strict=True)]),
        "client_cpu": Spread.of([m.client_cpu for k in measured for m in measured[k]]),
        "first_batches": statistics.median(long_run[:_EDGE]),
        "last_batches": statistics.median(long_run[-_EDGE:]),
        "first_batches_cpu": cpu_first,
        "last_batches_cpu": cpu_last,
        "batches": batches,
    }


def main(rounds: int = 5, runs_per_client: int = 15, batches: int = 300) -> dict[str, Any]:
    r = asyncio.run(_run(rounds, runs_per_client, batches))
    load = machine_load()
    ours, trivial = r["ours"], r["trivial"]
    client = r["client_cpu"]
    emit(
        Row(
            figure=(
                f"HTTP ingestion: server CPU per request (header + 4 chat events, redact-v1, "
                f"SQLite; {CLIENTS} raw-socket keep-alive clients; median of {r['rounds']} "
                f"rounds of {r['requests_per_round']} requests)"
            ),
            value=(
                f"{r['ours_cpu'].text()}; the event loop's thread {r['ours_loop_cpu'].text()}, "
                "the rest the stores' writer threads"
            ),
            baseline=f"trivial FastAPI app with the same routes {r['trivial_cpu'].text()}",
            ratio=r["cpu_ratio"].median,
            goal=(
                "<= 2x the trivial app's (per-round ratios "
                f"{r['cpu_ratio'].low:.2f}–{r['cpu_ratio'].high:.2f})"
            ),
            met=r["cpu_ratio"].median <= 2.0,
            load=load,
        )
    )
    emit(
        Row(
            figure=f"HTTP ingestion: request rate (the same rounds, {CLIENTS} clients)",
            value=(
                f"{ours.median:,.0f} req/s ({ours.low:,.0f}–{ours.high:,.0f}), "
                f"p99 {r['ours_p99'] * 1000:,.0f} ms"
            ),
            baseline=(
                f"trivial app {trivial.median:,.0f} req/s ({trivial.low:,.0f}–"
                f"{trivial.high:,.0f}), p99 {r['trivial_p99'] * 1000:,.0f} ms; the client's "
                f"own CPU {client.text()} a request"
            ),
            ratio=ours.median / trivial.median,
            goal="— (moves with the machine's load; the CPU row is the measure)",
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
    parser = argparse.ArgumentParser(prog="python -m bench.bench_ingest")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs-per-client", type=int, default=15)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    main(args.rounds, args.runs_per_client, args.batches)
