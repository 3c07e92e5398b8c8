"""The sandbox's write quotas (issue 35): per batch (a runaway step is stopped at
``REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES`` whatever the replay wrote before) and per replay (its
total may grow by ``REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES_PER_STEP`` for each completed step).
Called on the broker directly, as a hostile child would."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from activities.sandbox import codec
from activities.sandbox.broker import StepBroker
from activities.sandbox.config import SandboxSettings
from activities.sandbox.guard import Quotas
from examples.coding_agent import coding_catalog, record_coding_run
from models import ReplayMode
from models.errors import SandboxQuotaError
from models.replay_flow import ReplayCursorsView, ReplayPlan, StepInput
from runtime.env_values import read_section
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings

QUOTAS = Quotas(
    write_bytes=4096, calls_per_batch=50, message_bytes=1 << 20, write_bytes_per_step=1000
)


@pytest.fixture
async def stores(tmp_path: Path):
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def _broker(stores, written: int, steps_before: int) -> StepBroker:
    source = await record_coding_run(stores.ledger, stores.artifacts, "print('hi')")
    engine = ReplayEngine(
        stores.ledger, stores.evidence, stores.artifacts, {"coding-agent": coding_catalog()}
    )
    plan = ReplayPlan(
        replay_id=f"replay-quota-{uuid.uuid4().hex[:8]}",
        source_run_id=source.run_id,
        mode=ReplayMode.RECORDED,
    )
    step = StepInput(
        plan=plan,
        step_id="run_generated_code",
        state_ref=None,
        cursors=ReplayCursorsView(),
        head=1,
        step_index=steps_before,
        written_bytes=written,
    )
    return await StepBroker.open(engine, step, QUOTAS)


def _put(size: int) -> dict[str, str | None]:
    return {"data": codec.b64(uuid.uuid4().bytes * (size // 16))}


async def test_a_long_replay_may_write_more_than_one_batch_s_quota(stores) -> None:
    # 100 steps done, 90,000 bytes written: over the batch quota in total, within the allowance
    broker = await _broker(stores, written=90_000, steps_before=100)
    await broker.handle("artifacts.put", _put(3200))
    assert broker.written == 93_200


async def test_one_batch_is_stopped_at_its_quota_whatever_the_allowance(stores) -> None:
    broker = await _broker(stores, written=0, steps_before=10_000)
    await broker.handle("artifacts.put", _put(3200))
    with pytest.raises(SandboxQuotaError, match=r"this batch .*REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES"):
        await broker.handle("artifacts.put", _put(3200))
    assert broker.written == 3200


async def test_a_replay_over_its_allowance_is_stopped(stores) -> None:
    # 3 steps done: allowance 4096 + 3 * 1000 bytes; 6,000 already written
    broker = await _broker(stores, written=6_000, steps_before=3)
    with pytest.raises(SandboxQuotaError, match="allowance of 7096 after 3 steps"):
        await broker.handle("artifacts.put", _put(1600))
    assert broker.written == 6_000


def test_the_per_step_allowance_is_a_setting() -> None:
    assert SandboxSettings().max_write_bytes_per_step == 256 * 1024
    changed = read_section(SandboxSettings, {"REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES_PER_STEP": "5"})
    assert changed.max_write_bytes_per_step == 5
