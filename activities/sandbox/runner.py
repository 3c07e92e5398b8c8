"""Run batches of replay steps in sandboxed processes and broker their store calls.

A replay's batches arrive one activity at a time. Starting a sandbox and reloading the source
evidence for each of them made a recorded replay about five times slower, so the process that
ran a replay's batch is kept for its next batch on this worker (keyed by replay id): it is
killed when the replay finishes, fails, is canceled or closed, after ``idle_seconds`` without
a batch, when it has used a quarter of its CPU limit (RLIMIT_CPU counts a process's whole
life), after ``jobs_per_process`` batches, and with the worker. A batch that lands on another
worker, or after a crash, simply starts a new process: the process holds only caches (the
windows of the source evidence, the catalogs), so the outputs are the same either way. Between
batches the child kills whatever the step's code left running and empties its /tmp.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

import structlog

from activities.sandbox import codec, ending, rpc
from activities.sandbox.broker import StepBroker
from activities.sandbox.config import SandboxSettings
from activities.sandbox.demand import EXPECT_SECONDS, Demand
from activities.sandbox.guard import Quotas
from activities.sandbox.process import StepProcess, why_it_died
from models.errors import (
    ReplaybookError,
    SandboxedStepFailedError,
    SandboxUnavailableError,
    SandboxViolationError,
)
from models.replay_flow import StepInput, StepOutput
from runtime.providers.wire import wire_settings
from runtime.replay.engine import ReplayEngine

log = structlog.get_logger(__name__)
#: a kept process is replaced once it has used this share of its CPU limit, so the next batch
#: still gets at least three quarters of the limit
RECYCLE_AT_CPU_SHARE = 0.25
#: a broker call in progress when a step is stopped at the replay's deadline is given up to
#: this long to end first (an append takes milliseconds; a slow live model call, which writes
#: nothing, is not waited for longer)
CALL_GRACE_SECONDS = 10.0


class SandboxedSteps:
    """``run_steps`` like the engine's, with the steps executed under bubblewrap."""

    def __init__(
        self,
        engine: ReplayEngine,
        settings: SandboxSettings,
        *,
        catalog_factory: str,
    ) -> None:
        self.engine = engine
        self.settings = settings
        #: ``module:function`` the child imports to build its agent catalogs (a reference, not a
        #: callable: the child is another process); the worker passes its own
        self.catalogs = catalog_factory
        #: the isolation recorded for the steps this runner executes
        self.isolation = settings.isolation
        self.quotas = Quotas(
            write_bytes=settings.max_write_bytes,
            calls_per_batch=settings.max_calls_per_batch,
            message_bytes=settings.max_message_bytes,
            write_bytes_per_step=settings.max_write_bytes_per_step,
        )
        #: uid offsets of the sandboxes alive now, running or kept (each gets its own uid)
        self._slots: set[int] = set()
        #: processes kept between a replay's batches, by replay id
        self._kept: dict[str, StepProcess] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # sandboxes starting at once compete for the CPU with the worker's own heartbeats:
        # more than a few per core only queue up (the waiting activity keeps heartbeating)
        self._running = asyncio.Semaphore(2 * (os.cpu_count() or 1))
        self._max_kept = 4 * (os.cpu_count() or 1)
        #: started processes not yet serving any replay (``settings.warm_processes`` of them,
        #: more while a fan-out announced with ``expect`` has children to come)
        self._warm: list[StepProcess] = []
        self._refilling: asyncio.Task[None] | None = None
        self._demand = Demand()
        #: first batches of a fan-out waiting for the pool's next started process
        self._waiting: list[asyncio.Future[StepProcess | None]] = []
        #: warm processes started at once when the pool is short (each start is CPU-bound)
        self._starting_at_once = 2 * (os.cpu_count() or 1)
        #: processes started and batches run (for the benchmark and the tests)
        self.started = 0
        self.batches = 0

    async def run_steps(self, step: StepInput) -> StepOutput:
        # a replay's first batch during a fan-out waits for the pool's next process outside
        # the batches' semaphore: batches in started processes never queue behind starts
        ready = None if step.plan.replay_id in self._kept else await self._ready(step)
        async with self._running:
            child = ready or self._kept.pop(step.plan.replay_id, None)
            if child is not None and child.idle_timer is not None:
                child.idle_timer.cancel()
            if child is None or not child.alive:
                if child is not None:
                    await self._release(child)
                child = await self._take(step.plan.replay_id)
            try:
                try:
                    output = await self._batch(child, step)
                except SandboxedStepFailedError:
                    if not (child.jobs > 1 and child.frames == 0):
                        raise
                    # a kept process that died between batches, before this one reached it:
                    # nothing of the batch ran, so it runs in a new process
                    await self._release(child)
                    child = await self._start(step.plan.replay_id)
                    output = await self._batch(child, step)
            except BaseException:  # failed, violated, timed out or canceled: never reused
                await self._release(child)
                raise
            if output.finished or not self._reusable(child):
                await self._release(child)
            else:
                self._keep(child)
            return output

    async def close(self, replay_id: str) -> None:
        """Kill the process kept for ``replay_id`` (the replay ended or was canceled)."""
        child = self._kept.pop(replay_id, None)
        if child is not None:
            await self._release(child)

    async def aclose(self) -> None:
        """Kill every kept and warm process (the worker is shutting down)."""
        if self._refilling is not None:
            self._refilling.cancel()
            await asyncio.gather(self._refilling, return_exceptions=True)
        for replay_id in list(self._kept):
            await self.close(replay_id)
        while self._warm:
            await self._release(self._warm.pop())
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def kept(self) -> dict[str, int]:
        """Replay id -> pid of the process kept for its next batch."""
        return {r: c.process.pid for r, c in self._kept.items()}

    # the pool ---------------------------------------------------------------------------------

    async def warm_up(self) -> None:
        """Start the warm processes now (the pool refills itself after each one is taken)."""
        self._refill_soon()
        if self._refilling is not None:
            await asyncio.shield(self._refilling)

    @property
    def warm(self) -> list[int]:
        """Pids of the started processes waiting for a replay."""
        return [c.process.pid for c in self._warm]

    def expect(self, key: str, count: int) -> int:
        """``count`` child replays whose ids start with ``key-`` are about to run here (an
        incident's or a ``--repeat`` parent's fan-out): the pool grows to hold a started
        process for each (at most ``settings.fanout_warm``) now, off their first batch's path.
        Returns the pool's new size."""
        self._demand.expect(key, count, time.monotonic())
        asyncio.get_running_loop().call_later(EXPECT_SECONDS + 1, self._trim)
        self._refill_soon()
        return self._target()

    def _target(self) -> int:
        """How many warm processes the pool holds now (those waited for included)."""
        wanted = self._demand.wanted(time.monotonic()) + len(self._waiting)
        return max(self.settings.warm_processes, min(wanted, self.settings.fanout_warm))

    async def _ready(self, step: StepInput) -> StepProcess | None:
        """A replay's first batch while the pool is filling for a fan-out: the pool's next
        started process (taken in turn, never a start of its own competing with the pool's);
        None when fan-outs are off or the pool is not filling (the batch takes as usual)."""
        if not self.settings.fanout_warm or step.step_index:
            return None
        while self._warm:  # a process already waiting
            warm = self._warm.pop(0)
            if warm.alive:
                self._demand.taken(step.plan.replay_id)
                self._refill_soon()
                warm.replay_id = step.plan.replay_id
                return warm
            await self._release(warm)
        if self._refilling is None or self._refilling.done():
            return None
        self._demand.taken(step.plan.replay_id)
        waiter: asyncio.Future[StepProcess | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            child = await waiter
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
        if child is not None:
            child.replay_id = step.plan.replay_id
        return child

    def _handed(self, child: StepProcess) -> bool:
        """Give a newly started process to the first batch waiting for one, if any."""
        while self._waiting:
            waiter = self._waiting.pop(0)
            if not waiter.done():
                waiter.set_result(child)
                return True
        return False

    def _trim(self) -> None:
        """Warm processes of a fan-out whose children never came are stopped."""
        while len(self._warm) > self._target():
            self._close_later(self._warm.pop())

    async def _take(self, replay_id: str) -> StepProcess:
        """A warm process for ``replay_id`` if one is alive, else a new one; then refill."""
        self._demand.taken(replay_id)
        child = None
        while self._warm and child is None:
            candidate = self._warm.pop(0)
            if candidate.alive:
                child = candidate
                child.replay_id = replay_id
            else:
                await self._release(candidate)
        if child is None:
            child = await self._start(replay_id)
        self._refill_soon()
        return child

    def _refill_soon(self) -> None:
        if len(self._warm) < self._target() and (self._refilling is None or self._refilling.done()):
            self._refilling = asyncio.ensure_future(self._refill())

    async def _refill(self) -> None:
        """Start processes, several at once, until the pool reaches its target (a start that
        fails stops the refill: the next batch meets and reports the problem itself)."""
        starting: set[asyncio.Future[bool]] = set()
        failed = False
        try:
            while True:
                short = self._target() - len(self._warm) - len(starting)
                room = self._starting_at_once - len(starting)
                for _ in range(0 if failed else max(min(short, room), 0)):
                    starting.add(asyncio.ensure_future(self._warm_one()))
                if not starting:
                    return
                done, starting = await asyncio.wait(starting, return_when=asyncio.FIRST_COMPLETED)
                failed = failed or not all(task.result() for task in done)
        finally:
            for task in starting:
                task.cancel()
            await asyncio.gather(*starting, return_exceptions=True)
            for waiter in self._waiting:  # batches still waiting start their own process
                if not waiter.done():
                    waiter.set_result(None)
            self._waiting.clear()

    async def _warm_one(self) -> bool:
        """One more started and primed process in the pool (False: it could not be)."""
        try:
            child = await self._start("")
        except Exception as exc:
            log.warning("warm sandbox not started", error=str(exc))
            return False
        try:
            await self._prime(child)
        except asyncio.CancelledError:  # the worker is shutting down: leave nothing behind
            await self._release(child)
            raise
        except Exception as exc:
            log.warning("warm sandbox not primed", error=str(exc))
            await self._release(child)
            return False
        if not self._handed(child):
            self._warm.append(child)
        return True

    async def _prime(self, child: StepProcess) -> None:
        """Have a warm process import the agent catalogs and build its engine now, off any
        replay's path (what a first batch would otherwise do before its first step)."""
        prime = {
            "catalogs": self.catalogs,
            "isolation": self.settings.isolation,
            "models": self._models(),
        }
        await child.send({"prime": prime})
        async with asyncio.timeout(self.settings.wall_seconds):
            reply = await child.receive(self.quotas.message_bytes)
        if not (isinstance(reply, dict) and reply.get("primed") is True):
            raise rpc.ProtocolError(f"unexpected answer to prime: {str(reply)[:200]}")

    async def _start(self, replay_id: str) -> StepProcess:
        slot = next(i for i in range(len(self._slots) + 1) if i not in self._slots)
        self._slots.add(slot)
        try:
            child = await StepProcess.start(
                self.settings, self.settings.uid + slot, slot, replay_id
            )
        except BaseException:
            self._slots.discard(slot)
            raise
        self.started += 1
        return child

    async def _release(self, child: StepProcess) -> None:
        try:
            await child.close()
        finally:
            self._slots.discard(child.slot)

    def _reusable(self, child: StepProcess) -> bool:
        return (
            child.alive
            and child.jobs < self.settings.jobs_per_process
            and child.cpu_seconds < RECYCLE_AT_CPU_SHARE * self.settings.cpu_seconds
        )

    def _keep(self, child: StepProcess) -> None:
        previous = self._kept.pop(child.replay_id, None)
        if previous is not None:  # two batches of one replay ran at once: keep the newer
            self._close_later(previous)
        child.idle_since = time.monotonic()
        loop = asyncio.get_running_loop()
        child.idle_timer = loop.call_later(
            self.settings.idle_seconds, self._idle_out, child.replay_id, child
        )
        self._kept[child.replay_id] = child
        while len(self._kept) > self._max_kept:  # the longest idle goes first
            oldest = min(self._kept, key=lambda r: self._kept[r].idle_since)
            self._close_later(self._kept.pop(oldest))

    def _idle_out(self, replay_id: str, child: StepProcess) -> None:
        if self._kept.get(replay_id) is child:
            del self._kept[replay_id]
            self._close_later(child)

    def _close_later(self, child: StepProcess) -> None:
        task = asyncio.ensure_future(self._release(child))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # one batch --------------------------------------------------------------------------------

    async def _batch(self, child: StepProcess, step: StepInput) -> StepOutput:
        broker = await StepBroker.open(self.engine, step, self.quotas)
        child.stderr.clear()
        limit, left = self.settings.wall_seconds, _seconds_left(step)
        began = time.monotonic()
        try:
            async with asyncio.timeout(limit if left is None else max(min(limit, left), 0.0)):
                return await self._serve(child, broker, step)
        except TimeoutError:
            if left is not None and left < limit:
                # the replay's time limit passed inside the step: stopped, not waited for
                await child.close()
                assert step.plan.budget.max_duration is not None
                why = (
                    f"budget: max_duration "
                    f"{step.plan.budget.max_duration.total_seconds():g}s reached inside step "
                    f"{step.step_id}: its sandboxed process was stopped after "
                    f"{time.monotonic() - began:.1f} s"
                )
                return await ending.end_batch(self.engine, broker, step, stopped=why)
            raise SandboxedStepFailedError(
                f"step {step.step_id}: killed after {self.settings.wall_seconds:.0f} s "
                "(wall-clock limit of a sandboxed step)",
                retryable=False,
            ) from None

    def _models(self) -> dict[str, dict[str, dict[str, str]]]:
        """Each catalog's models (name → profile, and for an OpenAI-compatible endpoint its
        model id and ``tool_calling``), for the child's brokered catalogs: the child records
        the body the worker's provider sends (``runtime.providers.wire``)."""
        return {
            graph_id: {
                name: {"profile": model.profile, **(wire_settings(model) or {})}
                for name, model in catalog.models.items()
            }
            for graph_id, catalog in self.engine.catalogs.items()
        }

    async def _serve(self, child: StepProcess, broker: StepBroker, step: StepInput) -> StepOutput:
        job = {
            "step": step.model_dump(mode="json"),
            "catalogs": self.catalogs,
            "isolation": self.settings.isolation,
            # the worker's models by graph: the child's catalogs are built without settings
            "models": self._models(),
            # only a process we started under bubblewrap may clean its pid namespace
            "tidy": True,
        }
        child.jobs += 1
        child.frames = 0
        self.batches += 1
        # a step that may be stopped at the replay's deadline finishes a call it is in first
        answer = _answered if step.deadline is not None else _answer
        try:
            await child.send(job)
            while True:
                message = await child.receive(self.quotas.message_bytes)
                child.frames += 1
                if not isinstance(message, dict):
                    raise rpc.ProtocolError("a frame that is not an object")
                if "call" in message:
                    await child.send(await answer(broker, message))
                elif broker.ended:  # refused or over a quota: the child's account is not taken
                    return await ending.end_batch(self.engine, broker, step)
                elif "done" in message:
                    child.cpu_seconds = float(message.get("cpu_seconds") or 0.0)
                    output = StepOutput.model_validate(message["done"])
                    # the budget and the quota as the worker counted them, not the child
                    return output.model_copy(
                        update={"usage": broker.usage(), "written_bytes": broker.written}
                    )
                elif "failed" in message:
                    raise codec.load_error(message["failed"])
                else:
                    raise rpc.ProtocolError(f"unexpected frame keys {sorted(message)}")
        except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
            returncode = await child.process.wait()
            await asyncio.sleep(0)  # let the stderr drain see the last bytes
            raise SandboxedStepFailedError(
                f"step {step.step_id}: the sandboxed process "
                f"{why_it_died(returncode, self.settings)}{child.stderr_tail()}",
                retryable=False,
            ) from None
        except rpc.FrameTooLarge as exc:
            # over the message quota: the rest of the frame is never read, the process is
            # released with the batch (finished), the replay stops with a partial result
            broker.stop("message_bytes", f"a message of {exc.length} bytes: {exc}")
            return await ending.end_batch(self.engine, broker, step)
        except rpc.ProtocolError as exc:
            ending.count(["protocol"])
            raise SandboxViolationError(
                f"step {step.step_id}: broke the pipe protocol: {exc}", retryable=False
            ) from None


def _seconds_left(step: StepInput) -> float | None:
    """Seconds until the replay's deadline (its ``max_duration``), or None without one."""
    if step.deadline is None:
        return None
    return (step.deadline - datetime.now(UTC)).total_seconds()


async def _answered(broker: StepBroker, message: dict[str, Any]) -> dict[str, Any]:
    """``_answer``, finished even when the batch is stopped at its deadline meanwhile (an
    append is whole or not at all: the stop is recorded after it, never beside it)."""
    answering = asyncio.ensure_future(_answer(broker, message))
    try:
        return await asyncio.shield(answering)
    except asyncio.CancelledError:
        await asyncio.wait({answering}, timeout=CALL_GRACE_SECONDS)
        raise


async def _answer(broker: StepBroker, message: dict[str, Any]) -> dict[str, Any]:
    try:
        params = message.get("params") or {}
        if not isinstance(params, dict):
            raise TypeError("params is not an object")
        puts = message.get("puts") or []
        if not isinstance(puts, list):
            raise TypeError("puts is not a list")
        return {"ok": await broker.handle(str(message["call"]), params, puts)}
    except ReplaybookError as exc:
        return {"error": codec.dump_error(exc)}
    except (KeyError, TypeError, ValueError) as exc:  # malformed frame from the child
        return {"error": codec.dump_error(broker.malformed(message.get("call"), exc))}


__all__ = ["SandboxUnavailableError", "SandboxedSteps"]
