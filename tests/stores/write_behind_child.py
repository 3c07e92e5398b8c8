"""A recorder that acknowledges some events as durable, hands more to the writer and is
SIGKILLed (``test_write_behind``): ``python -m tests.stores.write_behind_child URL RUN_ID``."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime

from models import ExecutionEventType, RunRecord
from runtime.recorder import RunRecorder
from stores.artifacts import LocalArtifactStore
from stores.sql.database import open_database
from stores.sql.ledger import SqlLedger

ACKED = 5


async def main(url: str, run_id: str, artifacts: str) -> None:
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
        await recorder.record(ExecutionEventType.MODEL_CALL, payload={"i": i})
        i += 1
        if i % 50 == 0:
            print("MORE", flush=True)
            await asyncio.sleep(0)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
