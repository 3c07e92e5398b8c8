"""A process that dispatches one write and hangs before its outcome is known: the parent
SIGKILLs it there (``test_kill_mid_write``). Settings come from its environment."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from models import RunRecord
from models.canonical import canonical_hash
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.bundle import open_stores
from worker.settings import load_settings


async def main(run_id: str) -> None:
    async with open_stores(load_settings().stores) as stores:
        await stores.ledger.create_run(
            RunRecord(
                run_id=run_id, graph_id="chaos", graph_version="1", created_at=datetime.now(UTC)
            )
        )
        recorder = RunRecorder(stores.ledger, stores.artifacts, run_id)
        recorder.step_id = "act"

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
    asyncio.run(main(sys.argv[1]))
