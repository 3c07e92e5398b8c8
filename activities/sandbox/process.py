"""One sandboxed step process as the worker sees it: its pipes, its stderr tail, its end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

from activities.sandbox import rpc
from activities.sandbox.bwrap import python_argv, spawn
from activities.sandbox.config import SandboxSettings
from models.errors import SandboxStartTimeoutError, SandboxUnavailableError

#: the last bytes of the step's stderr kept for the failure report
STDERR_TAIL = 4096
CHILD_MODULE = "activities.sandbox.child"


class StepProcess:
    """A child running ``activities.sandbox.child`` under bubblewrap, serving one replay's
    batches on this worker until it is closed."""

    def __init__(self, process: asyncio.subprocess.Process, slot: int, replay_id: str) -> None:
        assert process.stdin and process.stdout and process.stderr
        self.process = process
        self.slot = slot
        self.replay_id = replay_id
        self.stderr = bytearray()
        self.jobs = 0
        #: frames received from the process in its current batch
        self.frames = 0
        #: CPU seconds the child reported after its last job (RLIMIT_CPU is per lifetime)
        self.cpu_seconds = 0.0
        self.idle_since = time.monotonic()
        self._draining = asyncio.create_task(_drain(process.stderr, self.stderr))
        self.exited: asyncio.Future[int] = asyncio.ensure_future(process.wait())
        self.idle_timer: asyncio.TimerHandle | None = None

    @classmethod
    async def start(
        cls, settings: SandboxSettings, uid: int, slot: int, replay_id: str
    ) -> StepProcess:
        """A started process that has reported ready (its first frame). One that does not
        within ``settings.start_seconds`` is killed: ``SandboxStartTimeoutError``, not a wait
        for ever; one that exits first: ``SandboxUnavailableError`` with its stderr."""
        child = cls(await spawn(settings, python_argv(CHILD_MODULE), uid), slot, replay_id)
        try:
            async with asyncio.timeout(settings.start_seconds):
                ready = await child.receive(rpc.MAX_READY_BYTES)
        except TimeoutError:
            await child.close()
            raise SandboxStartTimeoutError(
                f"the sandboxed process (pid {child.process.pid}) did not report ready within "
                f"{settings.start_seconds:g} s (REPLAYBOOK_SANDBOX_START_SECONDS): killed"
                f"{child.stderr_tail()}"
            ) from None
        except (asyncio.IncompleteReadError, rpc.ProtocolError) as exc:
            await child.close()
            raise SandboxUnavailableError(
                f"the sandboxed process ended before it was ready ({exc or 'exited'})"
                f"{child.stderr_tail()}"
            ) from None
        except BaseException:
            await child.close()
            raise
        if not (isinstance(ready, dict) and "ready" in ready):
            await child.close()
            raise SandboxUnavailableError(f"unexpected first frame: {str(ready)[:200]}")
        return child

    @property
    def alive(self) -> bool:
        if self.process.returncode is not None or self.exited.done():
            return False
        try:  # dead but not reaped yet (the event loop has not seen its exit)
            return Path(f"/proc/{self.process.pid}/stat").read_text().split(") ")[1][0] != "Z"
        except (OSError, IndexError):
            return False

    async def send(self, message: Any) -> None:
        assert self.process.stdin
        self.process.stdin.write(rpc.encode_frame(message))
        await self.process.stdin.drain()

    async def receive(self, quota: int | None = None) -> Any:
        """The next frame; IncompleteReadError when bwrap itself exits first (the pipe may
        still be held open by a process inside, so end-of-file alone would not tell)."""
        assert self.process.stdout
        receiving = asyncio.ensure_future(_receive(self.process.stdout, quota))
        try:
            await asyncio.wait({receiving, self.exited}, return_when=asyncio.FIRST_COMPLETED)
            if not receiving.done():
                # exited: a last frame may still be in the pipe, which then closes promptly
                await asyncio.wait({receiving}, timeout=2.0)
            if receiving.done():
                return receiving.result()
            raise asyncio.IncompleteReadError(b"", None)
        finally:
            # also when this wait is canceled (a worker shutting down while a warm process
            # is primed): the read must not outlive it and fail unobserved
            receiving.cancel()

    async def close(self) -> None:
        """Kill the sandbox and everything in it, and reap it. Nothing is lost: the child
        holds only caches, every step it ran is recorded in the worker's ledger."""
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.process.returncode is None:
            kill_sandbox(self.process.pid)
        if self.process.stdin is not None:
            self.process.stdin.close()
        # a frame left unread (one over the message quota) would keep the pipe from reaching
        # its end, and asyncio's wait() waits for the pipes too: what is left is discarded
        discarding = asyncio.create_task(_discard(self.process.stdout))
        with contextlib.suppress(Exception):
            await self.process.wait()
        discarding.cancel()
        self._draining.cancel()

    def stderr_tail(self) -> str:
        text = bytes(self.stderr).decode(errors="replace").strip()
        if not text:
            return ""
        lines = text.splitlines()[-6:]
        return "; stderr: " + " | ".join(line.strip() for line in lines)[-800:]


async def _receive(stream: asyncio.StreamReader, quota: int | None) -> Any:
    length = rpc.check_length(await stream.readexactly(4), quota)
    return rpc.decode_body(await stream.readexactly(length))


async def _discard(stream: asyncio.StreamReader | None) -> None:
    if stream is None:
        return
    with contextlib.suppress(Exception):
        while await stream.read(65536):
            pass


async def _drain(stream: asyncio.StreamReader, into: bytearray) -> None:
    while chunk := await stream.read(65536):
        into += chunk
        del into[:-STDERR_TAIL]


def kill_sandbox(pid: int) -> None:
    """SIGKILL bwrap's inner process first — the init of the sandbox's pid namespace, whose
    death makes the kernel kill everything inside — then bwrap itself. (When the worker itself
    dies, bwrap's --die-with-parent does the same: the outer bwrap and the namespace's init both
    carry a parent-death SIGKILL; the uid change only clears it for the step process, which then
    dies with its namespace. tests/activities/sandbox/test_pool.py measures it with ps.)"""
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


def why_it_died(returncode: int, settings: SandboxSettings) -> str:
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
