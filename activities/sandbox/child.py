"""``python -m activities.sandbox.child``: run batches of replay steps inside the sandbox.

The worker writes job frames (the step input, the catalog factory, the isolation label) on
stdin, one at a time; every store access is a frame to the worker and back; each job's answer
is its last frame. The process lives for one replay's batches on this worker (the worker keeps
it while the replay runs and closes stdin, kills it or lets it idle out afterwards): it keeps
only caches between jobs (windows of the source's evidence, the agent catalogs), so a fresh
process computes the same outputs. End of input between jobs ends the process.

stdout is the protocol channel only: the step's own prints go to stderr (kept by the worker
for the report), so untrusted code cannot forge frames by printing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import resource
import select
import shutil
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO


def _protocol_streams() -> tuple[BinaryIO, BinaryIO]:
    rpc_in = os.fdopen(os.dup(0), "rb")
    rpc_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    os.close(devnull)
    return rpc_in, rpc_out


def main() -> None:
    rpc_in, rpc_out = _protocol_streams()
    # imported only now: nothing of ours runs before the protocol channel is set aside
    from activities.sandbox import codec, rpc

    # the worker's start watchdog waits for this frame (``StepProcess.start``)
    rpc.write_frame(rpc_out, {"ready": os.getpid()})

    #: artifacts put since the last frame: they ride on the next one (one message a step)
    unsent: list[dict[str, Any]] = []

    def call(method: str, params: dict[str, Any]) -> Any:
        frame: dict[str, Any] = {"call": method, "params": params}
        if unsent:
            frame["puts"] = list(unsent)
            unsent.clear()
        rpc.write_frame(rpc_out, frame)
        answer = rpc.read_frame(rpc_in)
        if "error" in answer:
            raise codec.load_error(answer["error"])
        return answer.get("ok")

    engines: dict[tuple[str, str, str], Any] = {}
    while True:
        try:
            job = rpc.read_frame(rpc_in)
        except rpc.EndOfInput:  # the worker is done with this process (or is gone)
            break
        if "prime" in job:  # a warm process: import the agent catalogs, build the engine, wait
            try:
                prime = job["prime"]
                models = prime.get("models") or {}
                key = _engine_key(prime, models)
                engines[key] = _engine(key[0], key[1], call, models, unsent)
            except BaseException as exc:
                rpc.write_frame(rpc_out, {"failed": _describe(exc)})
            else:
                rpc.write_frame(rpc_out, {"primed": True})
            continue
        try:
            output = asyncio.run(_run(job, call, engines, unsent))
            if unsent:  # puts after the job's last call: stored before the job answers
                call("artifacts.flush", {})
        except BaseException as exc:
            unsent.clear()  # every failure is reported to the worker
            rpc.write_frame(rpc_out, {"failed": _describe(exc)})
        else:
            rpc.write_frame(rpc_out, {"done": output, "cpu_seconds": _cpu_seconds()})
        sys.stderr.flush()
        if job.get("tidy"):
            _tidy()
    rpc_out.close()
    sys.stderr.flush()
    os._exit(0)


def _cpu_seconds() -> float:
    """CPU time this process has used: RLIMIT_CPU counts it over the process's whole life,
    so the worker replaces the process before it runs short for the next job."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _tidy() -> None:
    """Leave nothing of a job's code behind for the next job: kill every other process of the
    sandbox and wait until each has exited, then empty the private /tmp. Only ever asked for
    by the worker that started us under bubblewrap."""
    _kill_the_others()
    # the code and the venv are bound read-only under /tmp when the checkout lives there
    kept = [Path(sys.prefix).resolve(), Path(__file__).resolve()]
    for entry in Path("/tmp").iterdir():
        if any(path.is_relative_to(entry) for path in kept):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()


#: rounds of kill and wait (a process forking while ``kill(-1)`` runs can escape one round)
_KILL_ROUNDS = 8
#: how long one process may take to exit once SIGKILLed (one in uninterruptible sleep waits
#: for its I/O) before the next round looks again
_EXIT_WAIT_S = 5.0


def _kill_the_others() -> None:
    """SIGKILL every other process of this pid namespace (``kill(-1)`` never reaches its init
    nor us) and return once all of them have exited. A SIGKILL is delivered asynchronously:
    reaping with WNOHANG right after it let a sibling's next job still find the last job's
    process alive (seen: a sibling replay listed the one before it's ``sleep``)."""
    for _ in range(_KILL_ROUNDS):
        others = _living_others()
        if not others:
            return
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
        for pid in others:
            _wait_exited(pid)
        _reap_children()


def _living_others() -> list[int]:
    """The pids of this namespace other than its init and us that have not exited (a zombie
    has: its parent, we or the namespace's init, reaps it)."""
    me, pids = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (1, me):
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # gone while we looked
        if state not in (b"Z", b"X"):
            pids.append(int(entry))
    return pids


def _wait_exited(pid: int) -> None:
    """Wait until ``pid`` has exited: its pidfd becomes readable then (no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already
        return
    try:
        select.select([fd], [], [], _EXIT_WAIT_S)
    finally:
        os.close(fd)


def _reap_children() -> None:
    """Reap our own exited children (the others' are reaped by the namespace's init)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _describe(exc: BaseException) -> dict[str, Any]:
    from activities.sandbox import codec
    from models.errors import ReplaybookError

    if isinstance(exc, ReplaybookError):
        return codec.dump_error(exc)
    # anything else was raised by the step's code: reported under its own name
    return {
        "type": "SandboxedStepFailedError",
        "message": f"the step raised {type(exc).__name__}: {exc}",
        "attributes": {"raised": type(exc).__name__},
    }


async def _run(
    job: dict[str, Any],
    call: Any,
    engines: dict[tuple[str, str, str], Any],
    unsent: list[dict[str, Any]],
) -> Any:
    from models.replay_flow import StepInput

    models = job.get("models") or {}
    key = _engine_key(job, models)
    if key not in engines:
        engines[key] = _engine(key[0], key[1], call, models, unsent)
    output = await engines[key].run_steps(StepInput.model_validate(job["step"]))
    return output.model_dump(mode="json")


def _engine_key(job: dict[str, Any], models: dict[str, Any]) -> tuple[str, str, str]:
    """One engine per catalogs, isolation and the worker's models (a primed warm engine is
    found by the first job with the same three)."""
    return (str(job["catalogs"]), str(job["isolation"]), json.dumps(models, sort_keys=True))


def _engine(
    catalogs: str,
    isolation: str,
    call: Any,
    models: dict[str, Any],
    unsent: list[dict[str, Any]],
) -> Any:
    """An engine over the broker: its caches (windows of the source's evidence, what the
    replay consumed up to its head) are all it keeps between jobs, and each is checked against
    the replay's head or keyed by an immutable source run."""
    from activities.sandbox.proxies import (
        ProxyArtifacts,
        ProxyEvidence,
        ProxyLedger,
        brokered_catalog,
    )
    from activities.sandbox.source_windows import BrokeredEngine

    module_name, _, attribute = catalogs.partition(":")
    factory = getattr(importlib.import_module(module_name), attribute)
    # the factory gets no database: whatever would use one is served by the broker
    brokered = {gid: brokered_catalog(c, call, models.get(gid)) for gid, c in factory(None).items()}
    return BrokeredEngine(
        ProxyLedger(call),
        ProxyEvidence(call),
        ProxyArtifacts(call, unsent),
        brokered,
        isolation=isolation,
        call=call,
    )


if __name__ == "__main__":
    main()
