"""Run a batch of replay steps in a fresh sandboxed process and broker its store calls."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path
from typing import Any

import structlog

from activities.sandbox import codec, rpc
from activities.sandbox.broker import StepBroker
from activities.sandbox.bwrap import python_argv, spawn
from activities.sandbox.config import SandboxSettings
from models.errors import (
    ReplaybookError,
    SandboxedStepFailedError,
    SandboxUnavailableError,
    SandboxViolationError,
)
from models.replay_flow import StepInput, StepOutput
from runtime.replay.engine import ReplayEngine

log = structlog.get_logger(__name__)
#: the last bytes of the step's stderr kept for the failure report
STDERR_TAIL = 4096
CHILD_MODULE = "activities.sandbox.child"


class SandboxedSteps:
    """``run_steps`` like the engine's, with the steps executed under bubblewrap."""

    def __init__(
        self,
        engine: ReplayEngine,
        settings: SandboxSettings,
        catalogs: str = "worker.catalogs:catalogs",
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.catalogs = catalogs
        #: uid offsets of the sandboxes running now (each gets its own uid, see config)
        self._slots: set[int] = set()
        # sandboxes starting at once compete for the CPU with the worker's own heartbeats:
        # more than a few per core only queue up (the waiting activity keeps heartbeating)
        self._running = asyncio.Semaphore(2 * (os.cpu_count() or 1))

    async def run_steps(self, step: StepInput) -> StepOutput:
        async with self._running:
            return await self._sandboxed(step)

    async def _sandboxed(self, step: StepInput) -> StepOutput:
        broker = StepBroker(self.engine, step.plan)
        slot = next(i for i in range(len(self._slots) + 1) if i not in self._slots)
        self._slots.add(slot)
        try:
            return await self._run(step, broker, self.settings.uid + slot)
        finally:
            self._slots.discard(slot)

    async def _run(self, step: StepInput, broker: StepBroker, uid: int) -> StepOutput:
        process = await spawn(self.settings, python_argv(CHILD_MODULE), uid)
        assert process.stdin and process.stdout and process.stderr
        stderr = bytearray()
        draining = asyncio.create_task(_drain(process.stderr, stderr))
        try:
            async with asyncio.timeout(self.settings.wall_seconds):
                return await self._serve(process, broker, step, stderr)
        except TimeoutError:
            raise _not_retryable(
                SandboxedStepFailedError(
                    f"step {step.step_id}: killed after {self.settings.wall_seconds:.0f} s "
                    "(wall-clock limit of a sandboxed step)"
                )
            ) from None
        finally:
            if process.returncode is None:
                _kill_sandbox(process.pid)
            if process.stdin is not None:
                process.stdin.close()
            await process.wait()
            draining.cancel()

    async def _serve(
        self,
        process: asyncio.subprocess.Process,
        broker: StepBroker,
        step: StepInput,
        stderr: bytearray,
    ) -> StepOutput:
        assert process.stdin and process.stdout
        job = {
            "step": step.model_dump(mode="json"),
            "catalogs": self.catalogs,
            "isolation": self.settings.isolation,
        }
        try:
            await _send(process, job)
            exited = asyncio.ensure_future(process.wait())
            while True:
                message = await _receive_unless_exited(process.stdout, exited)
                if not isinstance(message, dict):
                    raise rpc.ProtocolError("a frame that is not an object")
                if "call" in message:
                    await _send(process, await _answer(broker, message))
                elif "done" in message:
                    return StepOutput.model_validate(message["done"])
                elif "failed" in message:
                    error = codec.load_error(message["failed"])
                    if broker.refused:
                        error = _not_retryable(error)
                    raise error
                else:
                    raise rpc.ProtocolError(f"unexpected frame keys {sorted(message)}")
        except (asyncio.IncompleteReadError, BrokenPipeError, ConnectionResetError):
            returncode = await process.wait()
            await asyncio.sleep(0)  # let the stderr drain see the last bytes
            raise _not_retryable(
                SandboxedStepFailedError(
                    f"step {step.step_id}: the sandboxed process {_why(returncode, self.settings)}"
                    f"{_tail(stderr)}"
                )
            ) from None
        except rpc.ProtocolError as exc:
            raise _not_retryable(
                SandboxViolationError(f"step {step.step_id}: broke the pipe protocol: {exc}")
            ) from None


async def _answer(broker: StepBroker, message: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": await broker.handle(str(message["call"]), dict(message.get("params") or {}))}
    except ReplaybookError as exc:
        return {"error": codec.dump_error(exc)}
    except (KeyError, TypeError, ValueError) as exc:  # malformed parameters from the child
        broker.refused.append(f"malformed {message.get('call')!r}: {exc!r}")
        return {"error": codec.dump_error(SandboxViolationError(f"malformed call: {exc!r}"))}


async def _send(process: asyncio.subprocess.Process, message: Any) -> None:
    assert process.stdin
    process.stdin.write(rpc.encode_frame(message))
    await process.stdin.drain()


async def _receive_unless_exited(stream: asyncio.StreamReader, exited: asyncio.Future[int]) -> Any:
    """The next frame; IncompleteReadError when bwrap itself exits first (the pipe may still
    be held open by a process inside, so end-of-file alone would not tell)."""
    receiving = asyncio.ensure_future(_receive(stream))
    await asyncio.wait({receiving, exited}, return_when=asyncio.FIRST_COMPLETED)
    if not receiving.done():
        # exited: a last frame may still be in the pipe, which then closes promptly
        await asyncio.wait({receiving}, timeout=2.0)
    if receiving.done():
        return receiving.result()
    receiving.cancel()
    raise asyncio.IncompleteReadError(b"", None)


async def _receive(stream: asyncio.StreamReader) -> Any:
    length = rpc.check_length(await stream.readexactly(4))
    return rpc.decode_body(await stream.readexactly(length))


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        into += chunk
        del into[:-STDERR_TAIL]


def _kill_sandbox(pid: int) -> None:
    """SIGKILL bwrap's inner process first — the init of the sandbox's pid namespace, whose
    death makes the kernel kill everything inside — then bwrap itself. bwrap's own
    --die-with-parent is not relied on: the uid change inside clears parent-death signals."""
    for child in _children(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _why(returncode: int, settings: SandboxSettings) -> str:
    """Name the limit behind a death: bwrap reports a signalled child as 128 + signal."""
    number = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    reasons = {
        signal.SIGXCPU: f"exceeded its CPU limit of {settings.cpu_seconds} s (SIGXCPU)",
        signal.SIGKILL: "was killed (SIGKILL: CPU hard limit or out of memory)",
        signal.SIGXFSZ: f"exceeded its file size limit of {settings.file_size_bytes} bytes",
        signal.SIGSEGV: "crashed (SIGSEGV)",
    }
    if number:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(number)
            return reasons.get(sig, f"was killed by {sig.name}")
    return f"exited with status {returncode} without an answer"


def _tail(stderr: bytearray) -> str:
    text = bytes(stderr).decode(errors="replace").strip()
    if not text:
        return ""
    lines = text.splitlines()[-6:]
    return "; stderr: " + " | ".join(line.strip() for line in lines)[-800:]


def _not_retryable(error: ReplaybookError) -> ReplaybookError:
    """Marked so the activity fails it without retries: running hostile code again cannot help."""
    error.retryable = False  # type: ignore[attr-defined]
    return error


__all__ = ["SandboxUnavailableError", "SandboxedSteps"]
