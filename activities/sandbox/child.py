"""``python -m activities.sandbox.child``: run a batch of replay steps inside the sandbox.

The worker writes one job frame (the step input, the catalog factory, the isolation label) on
stdin; every store access is a frame to the worker and back; the answer is the last frame.
stdout is the protocol channel only: the step's own prints go to stderr (kept by the worker
for the report), so untrusted code cannot forge frames by printing.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
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

    def call(method: str, params: dict[str, Any]) -> Any:
        rpc.write_frame(rpc_out, {"call": method, "params": params})
        answer = rpc.read_frame(rpc_in)
        if "error" in answer:
            raise codec.load_error(answer["error"])
        return answer.get("ok")

    job = rpc.read_frame(rpc_in)
    try:
        output = asyncio.run(_run(job, call))
    except BaseException as exc:  # every failure is reported to the worker
        rpc.write_frame(rpc_out, {"failed": _describe(exc)})
    else:
        rpc.write_frame(rpc_out, {"done": output})
    rpc_out.close()
    sys.stderr.flush()
    os._exit(0)


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


async def _run(job: dict[str, Any], call: Any) -> Any:
    from activities.sandbox.proxies import (
        ProxyArtifacts,
        ProxyEvidence,
        ProxyLedger,
        brokered_catalog,
    )
    from models.replay_flow import StepInput
    from runtime.replay.engine import ReplayEngine

    module_name, _, attribute = str(job["catalogs"]).partition(":")
    factory = getattr(importlib.import_module(module_name), attribute)
    # the factory gets no database: whatever would use one is served by the broker
    catalogs = {gid: brokered_catalog(c, call) for gid, c in factory(None).items()}
    engine = ReplayEngine(
        ProxyLedger(call),  # type: ignore[arg-type]
        ProxyEvidence(call),
        ProxyArtifacts(call),  # type: ignore[arg-type]
        catalogs,
        isolation=str(job["isolation"]),
    )
    output = await engine.run_steps(StepInput.model_validate(job["step"]))
    return output.model_dump(mode="json")


if __name__ == "__main__":
    main()
