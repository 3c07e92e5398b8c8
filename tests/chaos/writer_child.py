"""A process that dispatches one write and hangs before its outcome is known: the parent
SIGKILLs it there (``test_kill_mid_write``; with ``write-behind``, ``test_write_behind_kill``).
Settings come from its environment.

``write-behind``: it records as ``record_run`` does (events handed on without waiting), first
a step start and a model call referencing an artifact (whose ref it prints), then the write,
whose intent is durable before dispatch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from models import ExecutionEventType, RunRecord
from models.canonical import canonical_hash
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.bundle import open_stores
from worker.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]
WRITE_BEHIND = "write-behind"


def spawn(run_id: str, env: dict[str, str], *modes: str) -> subprocess.Popen[bytes]:
    """This module as a child process (its stdout piped: the lines it prints)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.writer_child", run_id, *modes],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


async def main(run_id: str, write_behind: bool) -> None:
    async with open_stores(load_settings().stores) as stores:
        await stores.ledger.create_run(
            RunRecord(
                run_id=run_id, graph_id="chaos", graph_version="1", created_at=datetime.now(UTC)
            )
        )
        recorder = RunRecorder(stores.ledger, stores.artifacts, run_id, write_behind=write_behind)
        recorder.step_id = "act"
        if write_behind:
            await recorder.record(ExecutionEventType.STEP_STARTED, payload={"step": "act"})
            state_ref = await recorder.store_json({"draft": "refund order 7"})
            await recorder.record(ExecutionEventType.MODEL_CALL, payload={"state_ref": state_ref})
            print(state_ref, flush=True)

        async def hang(key: str, preq: str) -> dict[str, Any]:
            print("DISPATCHED", flush=True)  # the provider has the request now
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        await SideEffectLedger(recorder).execute(
            capability_id="payment.refund",
            step_id="act",
            action_hash=canonical_hash({"order_id": run_id}),
            call=hang,
        )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], WRITE_BEHIND in sys.argv[2:]))
