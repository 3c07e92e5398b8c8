"""A recorder that acknowledges some events as durable, hands more to the writer and is
SIGKILLed (``test_write_behind``): ``python -m tests.stores.write_behind_child URL RUN_ID
ARTIFACTS [--with-artifacts]``; with ``--with-artifacts`` each event after the acknowledged
ones references an artifact stored just before it (``{"i": i}``, as ``state_ref``), and the
first 50 of them are made durable too (so that some are committed whenever it is killed)."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from models import ExecutionEventType, RunRecord
from runtime.recorder import RunRecorder
from stores.artifacts import LocalArtifactStore
from stores.sql.database import open_database
from stores.sql.ledger import SqlLedger

ACKED = 5


async def main(url: str, run_id: str, artifacts: str, with_artifacts: bool) -> None:
    db = await open_database(url)
    ledger = SqlLedger(db, LocalArtifactStore(artifacts))
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=datetime.now(UTC))
    )
    recorder = RunRecorder(ledger, ledger.artifacts, run_id, write_behind=True)  # type: ignore[arg-type]
    for i in range(ACKED):
        await recorder.record(
            ExecutionEventType.MODEL_CALL, payload={"i": i}, durable=i == ACKED - 1
        )
    print(f"ACKED {recorder.last_sequence}", flush=True)
    i = ACKED
    while True:  # never acknowledged: the parent kills us somewhere in here
        payload: dict[str, Any] = {"i": i}
        if with_artifacts:
            payload["state_ref"] = await recorder.store_json({"i": i})
        await recorder.record(ExecutionEventType.MODEL_CALL, payload=payload)
        i += 1
        if i % 50 == 0:
            if with_artifacts and i == 50:  # the first of them
                await recorder.flush()
            print("MORE", flush=True)
            await asyncio.sleep(0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], "--with-artifacts" in sys.argv[4:]))
