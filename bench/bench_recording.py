"""Benchmark: recording overhead per model/tool call (issue 21: gateway time − provider time).

Run with ``.venv/bin/python -m bench.bench_recording [--pg] [RUNS]`` (``python -m bench`` runs
it with PostgreSQL). Every call an agent makes through a recording gateway — a model call
(``RecordingModelGateway.complete``), a tool call (``RecordingToolGateway.call``, a write's
policy decision and side-effect transitions included) and a retrieval
(``RecordingKnowledgeGateway.search``) — is timed from the agent's side, and the time its
provider took inside it is subtracted: what remains is what recording costs the agent on that
call, durable waits included (a write's intent committed before its provider is called).
Recording is write-behind (``record_run``): the events are committed by the ledger's writer,
on the same event loop, so writer work that runs while a call waits is in that call's figure.

Two workloads: support-desk runs (the reference agent, its scenarios in turn, redaction
``redact-v2``, simulated providers on their own SQL store) and a 1,000-step synthetic run (one
READ tool call a step, a provider that does nothing). Reported as p50 and p99 over every call,
wall time and the event loop thread's CPU time, with the provider's own p50 as the baseline;
the synthetic row also gives the mean recording time per step outside the calls (its
STEP_STARTED, checkpoint and STEP_COMPLETED). The support-desk runs are recorded twice: with
every provider answering at once (the goal's row), and with the model answering after 50 ms
over a socket, as a model server does (context: whether a model's latency, during which the
evidence writes behind the model call finish, changes what the calls after it wait for).

A third row per backend puts recording beside a slow provider: synthetic steps whose tool
answers after 100 ms, each step timed from its STEP_STARTED to the next one (the step's whole
recording: STEP_STARTED, the tool call, the checkpoint, STEP_COMPLETED), against the same
provider awaited alone in rounds interleaved with them; the cost is the share of the recorded
step that is not the bare step, median of the rounds with their spread. It runs twice: the
provider awaiting an asyncio timer, and answering over a socket (``_Remote``) as a network
provider does; the two differ by asyncio's millisecond rounding of a timer's wait after the
loop woke for something else (recording's background commits), which only the first pays.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import os
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import Row, Spread, emit, machine_load
from bench.post_idle import post_idle_calls, post_idle_row
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import SCENARIOS, scenario_run_input, support_desk_spec
from examples.synthetic import synthetic_spec
from models.model_call import ModelRequest, ModelResponse
from runtime.knowledge import RecordingKnowledgeGateway, RetrievedChunk, Retriever
from runtime.model_gateway import RecordingModelGateway
from runtime.ports import ModelProvider
from runtime.session import AgentSpec, record_run
from runtime.tools import RecordingToolGateway, ToolCallContext, ToolProvider
from stores.bundle import open_stores
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

PG_ADMIN_URL = os.environ.get("REPLAYBOOK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SYNTHETIC_STEPS = 1000
GOAL_P50_MS, GOAL_P99_MS = 1.0, 5.0
#: the model's latency in the support desk's context row: a hosted model answers in hundreds
#: of milliseconds, a small local one in tens
MODEL_DELAY_S = 0.05


def _clocks() -> tuple[int, int]:
    """(wall, this thread's CPU) in nanoseconds."""
    return time.perf_counter_ns(), time.thread_time_ns()


@dataclasses.dataclass
class CallTimes:
    """What one gateway call cost: its wall and CPU time, and its provider's."""

    kind: str
    wall_ns: int
    cpu_ns: int
    provider_wall_ns: int = 0
    provider_cpu_ns: int = 0
    #: the template, capability or query the call was made with
    what: str = ""

    @property
    def overhead_ms(self) -> float:
        return (self.wall_ns - self.provider_wall_ns) / 1e6

    @property
    def overhead_cpu_ms(self) -> float:
        return (self.cpu_ns - self.provider_cpu_ns) / 1e6


class CallTimer:
    """Times every recording gateway call and the provider time inside it (one run at a time:
    calls do not overlap, so the provider time goes to the call in progress)."""

    def __init__(self) -> None:
        self.calls: list[CallTimes] = []
        self._current: CallTimes | None = None

    @contextlib.contextmanager
    def gateways_timed(self) -> Iterator[None]:
        """The recording gateways' call methods wrapped with the timer while the block runs."""
        methods = [
            (RecordingModelGateway, "complete", "model"),
            (RecordingToolGateway, "call", "tool"),
            (RecordingKnowledgeGateway, "search", "retrieval"),
        ]
        originals = [(cls, name, getattr(cls, name)) for cls, name, _ in methods]
        for cls, name, kind in methods:
            setattr(cls, name, self._timed_gateway(getattr(cls, name), kind))
        try:
            yield
        finally:
            for cls, name, original in originals:
                setattr(cls, name, original)

    def _timed_gateway(
        self, method: Callable[..., Awaitable[Any]], kind: str
    ) -> Callable[..., Awaitable[Any]]:
        async def timed(gateway: Any, *args: Any, **kwargs: Any) -> Any:
            what = args[0] if args and isinstance(args[0], str) else ""
            outer, call = self._current, CallTimes(_kind(gateway, kind, what), 0, 0, what=what[:40])
            self._current = call
            wall, cpu = _clocks()
            try:
                return await method(gateway, *args, **kwargs)
            finally:
                wall_end, cpu_end = _clocks()
                call.wall_ns, call.cpu_ns = wall_end - wall, cpu_end - cpu
                self._current = outer
                self.calls.append(call)

        return timed

    async def provider(self, call: Awaitable[Any]) -> Any:
        """Await a provider's answer, its time counted as the current call's provider time."""
        wall, cpu = _clocks()
        try:
            return await call
        finally:
            wall_end, cpu_end = _clocks()
            if self._current is not None:
                self._current.provider_wall_ns += wall_end - wall
                self._current.provider_cpu_ns += cpu_end - cpu

    def timed_spec(self, spec: AgentSpec, model_wait: _Remote | None = None) -> AgentSpec:
        """``spec`` with its model, tool providers and retriever timed (same names, profile and
        versions, so the recorded evidence is the same); ``model_wait``: asked before each
        model answer (a model server's latency)."""
        return dataclasses.replace(
            spec,
            model=_TimedModel(spec.model, self, model_wait),
            tool_providers={
                name: self._timed_tool(provider) for name, provider in spec.tool_providers.items()
            },
            retriever=_TimedRetriever(spec.retriever, self),
        )

    def _timed_tool(self, provider: ToolProvider) -> ToolProvider:
        async def timed(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
            answer: dict[str, Any] = await self.provider(provider(arguments, context))
            return answer

        return timed

    def since(self, start: int) -> list[CallTimes]:
        return self.calls[start:]


def _kind(gateway: Any, kind: str, capability_id: str) -> str:
    """A tool call's kind by its capability: a write call waits for its intent's durable
    point before the provider hears of it (the calls the p99 comes from), a read does not."""
    if kind != "tool":
        return kind
    registry = gateway.registry
    write = capability_id in registry and registry.get(capability_id).is_write
    return "write tool" if write else "read tool"


class _TimedModel:
    def __init__(self, inner: ModelProvider, timer: CallTimer, wait: _Remote | None = None) -> None:
        self._inner = inner
        self._timer = timer
        self._wait = wait
        self.profile = inner.profile

    def __getattr__(self, name: str) -> Any:  # price, version…: the model's own
        return getattr(self._inner, name)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response: ModelResponse = await self._timer.provider(self._answer(request))
        return response

    async def _answer(self, request: ModelRequest) -> ModelResponse:
        if self._wait is not None:
            await self._wait.ask()
        return await self._inner.complete(request)


class _TimedRetriever:
    def __init__(self, inner: Retriever, timer: CallTimer) -> None:
        self._inner = inner
        self._timer = timer
        self.version = inner.version
        self.snapshot = inner.snapshot

    async def search(self, query: str, k: int) -> list[RetrievedChunk]:
        chunks: list[RetrievedChunk] = await self._timer.provider(self._inner.search(query, k))
        return chunks


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0–100) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary(calls: list[CallTimes]) -> dict[str, float]:
    overhead = [c.overhead_ms for c in calls]
    cpu = [c.overhead_cpu_ms for c in calls]
    provider = [c.provider_wall_ns / 1e6 for c in calls]
    return {
        "calls": len(calls),
        "p50_ms": percentile(overhead, 50),
        "p99_ms": percentile(overhead, 99),
        "max_ms": max(overhead),
        "cpu_p50_ms": percentile(cpu, 50),
        "cpu_p99_ms": percentile(cpu, 99),
        "provider_p50_ms": percentile(provider, 50),
        **{
            f"{kind}_p50_ms": percentile([c.overhead_ms for c in calls if c.kind == kind], 50)
            for kind in sorted({c.kind for c in calls})
        },
    }


def _settings(home: Path, database_url: str) -> Settings:
    return Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": database_url,
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )


async def support_desk_calls(
    database_url: str, home: Path, runs: int, model_delay_s: float = 0.0
) -> dict[str, float]:
    """Record ``runs`` support-desk runs (scenarios in turn, after one warm-up run of each).
    ``model_delay_s``: the model answers that much later, over a socket (``_Remote``), as a
    model server does; its wait is provider time, not recording's."""
    timer = CallTimer()
    remote = _Remote(model_delay_s) if model_delay_s else None
    async with contextlib.AsyncExitStack() as closing:
        if remote is not None:
            closing.callback(remote.close)
        return await _record_support_desk(database_url, home, runs, timer, remote)


async def _record_support_desk(
    database_url: str, home: Path, runs: int, timer: CallTimer, remote: _Remote | None
) -> dict[str, float]:
    async with open_stores(_settings(home, database_url).stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        scenarios = list(SCENARIOS)

        async def one(i: int) -> None:
            scenario = scenarios[i % len(scenarios)]
            ticket, labels = scenario_run_input(world, scenario)
            await record_run(
                timer.timed_spec(support_desk_spec(world), model_wait=remote),
                stores.ledger,
                stores.artifacts,
                run_id=f"run-bench-{uuid.uuid4().hex[:12]}",
                agent_input=ticket,
                seed=i,
                labels=labels,
            )

        with timer.gateways_timed():
            for i in range(len(scenarios)):  # warm up: imports, statements, the manifest
                await one(i)
            start = len(timer.calls)
            for i in range(runs):
                await one(i)
        return {"runs": runs, **summary(timer.since(start))}


async def _nothing(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
    return {"value": arguments["i"] % 7}


async def synthetic_calls(home: Path, steps: int = SYNTHETIC_STEPS) -> dict[str, float]:
    """Record one ``steps``-step synthetic run (after a 10-step warm-up run)."""
    timer = CallTimer()
    database_url = f"sqlite+aiosqlite:///{home / 'synthetic.db'}"
    async with open_stores(_settings(home, database_url).stores) as stores:

        async def one(total: int) -> float:
            spec = timer.timed_spec(synthetic_spec(total))
            started = time.perf_counter()
            await record_run(
                spec,
                stores.ledger,
                stores.artifacts,
                run_id=f"run-synthetic-{uuid.uuid4().hex[:10]}",
                agent_input={"steps": total},
                seed=0,
                labels={"agent": "synthetic-chain"},
            )
            return time.perf_counter() - started

        with timer.gateways_timed():
            await one(10)
            start = len(timer.calls)
            run_s = await one(steps)
        calls = timer.since(start)
        in_calls_s = sum(c.wall_ns for c in calls) / 1e9
        return {
            "steps": steps,
            "run_s": run_s,
            "outside_calls_ms_per_step": (run_s - in_calls_s) / steps * 1e3,
            **summary(calls),
        }


#: the slow-provider row: its provider's delay, steps per recorded run, rounds, goal
SLOW_PROVIDER_S = 0.1
SLOW_RUN_STEPS = 10
SLOW_ROUNDS = 3
SLOW_RUNS_PER_ROUND = 2
GOAL_SLOW_SHARE = 0.01


@contextlib.contextmanager
def _step_starts(starts: list[float]) -> Iterator[None]:
    """While the block runs, the time each STEP_STARTED is handed to a recorder."""
    from models import ExecutionEventType
    from runtime.recorder import RunRecorder

    original = RunRecorder.record

    async def record(recorder: RunRecorder, type: ExecutionEventType, **kwargs: Any) -> Any:
        if type is ExecutionEventType.STEP_STARTED:
            starts.append(time.perf_counter())
        return await original(recorder, type, **kwargs)

    RunRecorder.record = record  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        RunRecorder.record = original  # type: ignore[method-assign]


class _Remote:
    """A provider on the other end of a socket: a thread that answers each request after
    ``delay_s``. The caller's loop learns of the answer as it learns of a network reply, by
    the socket becoming readable, not by a timer: asyncio's selector rounds a timer's
    remaining wait up to a whole millisecond each time the loop wakes for something else
    (recording's background commits do, during the wait), which a reply on a socket never
    pays."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.ours, theirs = socket.socketpair()
        self.ours.setblocking(False)
        self._thread = threading.Thread(target=self._serve, args=(theirs,), daemon=True)
        self._thread.start()

    def _serve(self, theirs: socket.socket) -> None:
        with theirs:
            while theirs.recv(1):
                time.sleep(self.delay_s)
                theirs.sendall(b"!")

    async def ask(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(self.ours, b"?")
        await loop.sock_recv(self.ours, 1)

    def close(self) -> None:
        self.ours.close()  # the thread's recv returns b"": it ends
        self._thread.join(5)


async def slow_provider_steps(
    database_url: str,
    home: Path,
    rounds: int = SLOW_ROUNDS,
    runs_per_round: int = SLOW_RUNS_PER_ROUND,
    delay_s: float = SLOW_PROVIDER_S,
    answered: str = "timer",
) -> dict[str, Any]:
    """Recorded synthetic steps with a ``delay_s`` provider against the bare provider, in
    interleaved rounds (order turning): seconds per step of each, per round (medians).
    ``answered``: ``timer`` (the provider awaits ``asyncio.sleep``) or ``socket`` (its answer
    comes over a socket, as a network provider's does: ``_Remote``)."""
    from examples.synthetic import counter_read

    remote = _Remote(delay_s) if answered == "socket" else None

    async def slow(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
        if remote is not None:
            await remote.ask()
        else:
            await asyncio.sleep(delay_s)
        return await counter_read(arguments, context)

    base = synthetic_spec(SLOW_RUN_STEPS)
    spec = dataclasses.replace(base, tool_providers={"counter.read": slow})
    recorded: list[float] = []
    bare: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        if remote is not None:
            stack.callback(remote.close)
        stores = await stack.enter_async_context(open_stores(_settings(home, database_url).stores))

        async def recorded_round() -> float:
            per_step: list[float] = []
            for _ in range(runs_per_round):
                starts: list[float] = []
                with _step_starts(starts):
                    await record_run(
                        spec,
                        stores.ledger,
                        stores.artifacts,
                        run_id=f"run-slow-{uuid.uuid4().hex[:10]}",
                        agent_input={"steps": SLOW_RUN_STEPS},
                        seed=0,
                        labels={"agent": "synthetic-chain"},
                    )
                per_step += [b - a for a, b in itertools.pairwise(starts)]
            return sorted(per_step)[len(per_step) // 2]

        async def bare_round() -> float:
            per_step = []
            for i in range(runs_per_round * (SLOW_RUN_STEPS - 1)):
                started = time.perf_counter()
                await slow({"i": i}, None)  # type: ignore[arg-type]  # counter_read reads none
                per_step.append(time.perf_counter() - started)
            return sorted(per_step)[len(per_step) // 2]

        await recorded_round()  # warm up: imports, statements, the manifest
        for r in range(rounds):
            if r % 2 == 0:
                recorded.append(await recorded_round())
                bare.append(await bare_round())
            else:
                bare.append(await bare_round())
                recorded.append(await recorded_round())
    shares = [1 - b / a for a, b in zip(recorded, bare, strict=True)]
    return {
        "recorded_s": recorded,
        "bare_s": bare,
        "shares": shares,
        "delay_s": delay_s,
        "answered": answered,
    }


_ANSWERED = {"timer": "an asyncio timer", "socket": "a socket, as over a network"}


def _slow_row(backend: str, r: dict[str, Any], load: str) -> Row:
    recorded, bare, shares = (Spread.of(r[k]) for k in ("recorded_s", "bare_s", "shares"))
    return emit(
        Row(
            figure=f"a recorded step with a {r['delay_s'] * 1e3:.0f} ms provider ({backend}; "
            f"answered by {_ANSWERED[r['answered']]}; synthetic steps, STEP_STARTED to the "
            "next; median of "
            f"{len(r['shares'])} interleaved rounds)",
            value=f"{recorded.text(1e3, 'ms', 2)} a step; recording's share "
            f"{shares.median:.2%} ({shares.low:.2%}–{shares.high:.2%})",
            baseline=f"the provider alone {bare.text(1e3, 'ms', 2)} a step",
            ratio=recorded.median / bare.median,
            goal=f"recording <= {GOAL_SLOW_SHARE:.0%} of the step",
            met=shares.median <= GOAL_SLOW_SHARE,
            load=load,
        )
    )


def _row(
    figure: str, r: dict[str, float], load: str, extra: str = "", *, context: bool = False
) -> Row:
    """A recording-overhead row; ``context``: beside the goal's row, not judged (``met``
    None), its goal column saying which row the goal is judged on."""
    met = r["p50_ms"] <= GOAL_P50_MS and r["p99_ms"] <= GOAL_P99_MS
    goal = f"p50 <= {GOAL_P50_MS:g} ms, p99 <= {GOAL_P99_MS:g} ms"
    return emit(
        Row(
            figure=figure,
            value=f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms (CPU p50 "
            f"{r['cpu_p50_ms']:.2f} ms, p99 {r['cpu_p99_ms']:.2f} ms){extra}",
            baseline=f"provider p50 {r['provider_p50_ms']:.3f} ms a call",
            ratio=None,
            goal=f"— (context; judged on the row above: {goal})" if context else goal,
            met=None if context else met,
            load=load,
        )
    )


async def _support_desk_row(
    url: str, home: Path, name: str, runs: int, model_delay_s: float = 0.0
) -> dict[str, float]:
    """The support-desk row: the goal's (every provider answering at once) or, with
    ``model_delay_s``, its context (the model answering as a model server does)."""
    suffix = f"-model-{model_delay_s}" if model_delay_s else ""
    r = await support_desk_calls(url, home / f"{name}{suffix}", runs, model_delay_s)
    kinds = ", ".join(
        f"{kind} {r[f'{kind}_p50_ms']:.2f}"
        for kind in ("model", "read tool", "write tool", "retrieval")
        if f"{kind}_p50_ms" in r
    )
    setting = ""
    if model_delay_s:
        setting = f"; the model answering after {model_delay_s * 1000:.0f} ms over a socket"
    _row(
        f"recording overhead per model/tool call, support-desk runs ({name}{setting}; gateway "
        f"time − provider time; {r['calls']:.0f} calls of {runs} runs)",
        r,
        machine_load(),
        f"; p50 by kind (ms): {kinds}",
        context=bool(model_delay_s),
    )
    return r


async def _main(pg: bool, runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        backends = {"sqlite": f"sqlite+aiosqlite:///{home / 'rb.db'}"}
        pg_url = await create_scratch_database(PG_ADMIN_URL, "rb_bench_rec") if pg else None
        if pg_url is not None:
            backends["postgresql"] = pg_url
        try:
            for name, url in backends.items():
                # a quick run (``--quick``: a few support-desk runs) records one run a round
                for answered in _ANSWERED:
                    slow = await slow_provider_steps(
                        url,
                        home / f"{name}-slow-{answered}",
                        runs_per_round=SLOW_RUNS_PER_ROUND if runs >= 10 else 1,
                        answered=answered,
                    )
                    results[f"slow provider {name} {answered}"] = slow
                    _slow_row(name, slow, machine_load())
                if name == "sqlite":
                    idle = await post_idle_calls(SLOW_PROVIDER_S)
                    results["post-idle calls"] = idle
                    post_idle_row(idle, machine_load())
                results[f"support-desk {name}"] = await _support_desk_row(url, home, name, runs)
                results[
                    f"support-desk {name}, model after {MODEL_DELAY_S * 1000:.0f} ms"
                ] = await _support_desk_row(url, home, name, runs, MODEL_DELAY_S)
        finally:
            if pg_url is not None:
                await drop_scratch_database(PG_ADMIN_URL, pg_url)
        r = await synthetic_calls(home / "synthetic")
        results["synthetic"] = r
        _row(
            f"recording overhead per tool call, synthetic {r['steps']:,.0f}-step run (sqlite; "
            "gateway time − provider time)",
            r,
            machine_load(),
            f"; outside the calls {r['outside_calls_ms_per_step']:.2f} ms a step "
            "(STEP_STARTED, checkpoint, STEP_COMPLETED)",
        )
    return results


def main(pg: bool = True, runs: int = 30) -> dict[str, Any]:
    return asyncio.run(_main(pg, runs))


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    main("--pg" in sys.argv, numbers[0] if numbers else 30)
