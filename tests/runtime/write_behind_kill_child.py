"""A process that records write-behind (``record_run``'s mode) and is SIGKILLed once its
write's provider has the request (``test_write_behind_kill``): events recorded without
waiting, one of them referencing an artifact, then a write whose intent is durable before
dispatch. Settings come from its environment."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from models import ExecutionEventType, RunRecord
from models.canonical import canonical_hash
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.bundle import open_stores
from worker.settings import load_settings

E = ExecutionEventType


async def main(run_id: str) -> None:
    async with open_stores(load_settings().stores) as stores:
        await stores.ledger.create_run(
            RunRecord(
                run_id=run_id, graph_id="chaos", graph_version="1", created_at=datetime.now(UTC)
            )
        )
        recorder = RunRecorder(stores.ledger, stores.artifacts, run_id, write_behind=True)
        recorder.step_id = "act"
        await recorder.record(E.STEP_STARTED, payload={"step": "act"})
        state_ref = await recorder.store_json({"draft": "refund order 7"})
        await recorder.record(E.MODEL_CALL, payload={"state_ref": state_ref})
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
    asyncio.run(main(sys.argv[1]))
