"""A write-behind recorder SIGKILLed once its write is dispatched loses nothing the design
keeps: every event recorded before the write's intent (handed to the ledger when the loop
turned, not when recorded), the artifact one of them references, and the intent itself are
durable, on an intact chain (the write-ahead rule, DESIGN rule 5). The artifact, written in
place (``stores.artifacts.local``), is read back whole."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from models import ExecutionEventType
from models.canonical import canonicalize
from stores.bundle import open_stores
from tests.chaos.writer_child import WRITE_BEHIND, spawn
from worker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
E = ExecutionEventType


def _env(home: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))} | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
    }


def test_a_write_behind_run_killed_at_dispatch_keeps_everything_before_its_intent(
    tmp_path: Path,
) -> None:
    env = _env(tmp_path)
    run_id = "wb-kill-1"
    child = spawn(run_id, env, WRITE_BEHIND)
    try:
        assert child.stdout is not None
        state_ref = child.stdout.readline().decode().strip()
        assert child.stdout.readline().strip() == b"DISPATCHED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    async def read_back() -> None:
        settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("REPLAYBOOK_")})
        async with open_stores(settings.stores) as stores:
            events = await stores.ledger.events_with_payloads(run_id)
            assert [event.type for event, _ in events] == [
                E.STEP_STARTED,
                E.MODEL_CALL,
                E.SIDE_EFFECT,  # PLANNED
                E.SIDE_EFFECT,  # EXECUTING: the intent, durable before dispatch
            ]
            # there whole (a get checks the bytes against the name), not a short copy
            assert await stores.artifacts.get(state_ref) == canonicalize(
                {"draft": "refund order 7"}
            )
            assert (await stores.ledger.verify(run_id)).intact

    asyncio.run(read_back())
