"""One batch of a replay's steps in a started sandboxed process: the job sent, every store
call the process makes answered by the batch's broker (which decides what the replay's plan
allows, never the process), the answer checked, and the batch stopped at the replay's deadline
or the sandbox's wall-clock limit."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from activities.sandbox import codec, ending, rpc
from activities.sandbox.broker import StepBroker
from activities.sandbox.config import SandboxSettings
from activities.sandbox.guard import Quotas
from activities.sandbox.process import StepProcess, why_it_died
from models.errors import ReplaybookError, SandboxedStepFailedError, SandboxViolationError
from models.replay_flow import StepInput, StepOutput
from runtime.providers.wire import wire_settings
from runtime.replay.engine import ReplayEngine

#: a broker call in progress when a step is stopped at the replay's deadline is given up to
#: this long to end first (an append takes milliseconds; a slow live model call, which writes
#: nothing, is not waited for longer)
CALL_GRACE_SECONDS = 10.0


class Batches:
    """Runs batches for one worker's engine under its sandbox settings and quotas."""

    def __init__(
        self, engine: ReplayEngine, settings: SandboxSettings, quotas: Quotas, catalogs: str
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.quotas = quotas
        #: ``module:function`` the child imports to build its agent catalogs
        self.catalogs = catalogs
        #: batches run (for the benchmark and the tests)
        self.count = 0

    async def prime(self, child: StepProcess) -> None:
        """Have a warm process import the agent catalogs and build its engine now, off any
        replay's path (what a first batch would otherwise do before its first step)."""
        prime = {
            "catalogs": self.catalogs,
            "isolation": self.settings.isolation,
            "models": self.models(),
        }
        await child.send({"prime": prime})
        async with asyncio.timeout(self.settings.wall_seconds):
            reply = await child.receive(self.quotas.message_bytes)
        if not (isinstance(reply, dict) and reply.get("primed") is True):
            raise rpc.ProtocolError(f"unexpected answer to prime: {str(reply)[:200]}")

    async def run(self, child: StepProcess, step: StepInput) -> StepOutput:
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
                # a batch of several steps names its first and the steps it completed
                done = broker.completed_steps
                where = f"step {step.step_id}" + (
                    f" (a batch from there, {done} of its steps completed)" if done else ""
                )
                why = (
                    f"budget: max_duration "
                    f"{step.plan.budget.max_duration.total_seconds():g}s reached inside "
                    f"{where}: its sandboxed process was stopped after "
                    f"{time.monotonic() - began:.1f} s"
                )
                return await ending.end_batch(self.engine, broker, step, stopped=why)
            raise SandboxedStepFailedError(
                f"step {step.step_id}: killed after {self.settings.wall_seconds:.0f} s "
                "(wall-clock limit of a sandboxed step)",
                retryable=False,
            ) from None

    def models(self) -> dict[str, dict[str, dict[str, str]]]:
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
            "models": self.models(),
            # only a process we started under bubblewrap may clean its pid namespace
            "tidy": True,
        }
        child.jobs += 1
        child.frames = 0
        self.count += 1
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
