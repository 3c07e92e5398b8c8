"""Live READs of an imported tau-bench run from a sandboxed replay step, called on the broker as
the child calls them (no model, no sandbox needed): under ``sandbox-live`` a READ tool of the
run is answered by the world on a private copy; a WRITE tool, or the default ``fail`` policy,
is refused."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from activities.sandbox.broker import StepBroker
from activities.sandbox.guard import Quotas
from integrations.tau_bench.world.live import TauWorlds
from models import FixtureMissPolicy, ReplayMode
from models.errors import SandboxViolationError
from models.model_call import ModelRequest, ModelResponse
from models.replay_flow import ReplayCursorsView, ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings
from tests.fixtures_tau import ENV_DATA, import_shortest_airline_run
from worker.catalogs import catalogs


class NeverCalled:
    profile = "none"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise AssertionError("no model call in these tests")


QUOTAS = Quotas(write_bytes=1 << 20, calls_per_batch=50, message_bytes=1 << 20)


@pytest.fixture
async def stores(tmp_path: Path):
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def _broker(stores, tmp_path: Path, miss: FixtureMissPolicy):
    run_id = await import_shortest_airline_run(stores, tmp_path)
    worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
    # the tool loop with a model that is never called here (only the broker's reads are)
    loop = dataclasses.replace(
        catalogs(None, None, None, worlds)["tool-loop"], models={"none": NeverCalled()}
    )
    engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, {"tool-loop": loop})
    plan = ReplayPlan(
        replay_id=f"replay-tau-{uuid.uuid4().hex[:8]}",
        source_run_id=run_id,
        mode=ReplayMode.MODEL_SWAP,
        model_name="none",
        miss_policy=miss,
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    step = StepInput(
        plan=plan,
        step_id=prepared.start_step or "model",
        state_ref=prepared.state_ref,
        cursors=ReplayCursorsView(),
        head=prepared.head,
    )
    broker = await StepBroker.open(engine, step, QUOTAS)
    source = await engine.source(plan.source_run_id)
    return broker, worlds, source.start_time.isoformat()


def _read(name: str, arguments: dict, at: str) -> dict:
    return {
        "graph_id": "tool-loop",
        "capability_id": name,
        "arguments": arguments,
        "context": {"run_id": "ignored", "logical_time": at},
    }


async def test_a_read_is_answered_by_the_world_and_a_write_refused(stores, tmp_path) -> None:
    broker, worlds, at = await _broker(stores, tmp_path, FixtureMissPolicy.SANDBOX_LIVE)
    answer = await broker.handle(
        "tool.read", _read("get_user_details", {"user_id": "anya_garcia_5901"}, at)
    )
    user = worlds.base("7362a17", "airline").tables["users"]["anya_garcia_5901"]
    assert json.loads(answer["output"]) == user
    with pytest.raises(SandboxViolationError, match="WRITE"):
        await broker.handle(
            "tool.read", _read("cancel_reservation", {"reservation_id": "JMO1MG"}, at)
        )


async def test_the_default_policy_reads_nothing_live(stores, tmp_path) -> None:
    broker, _, at = await _broker(stores, tmp_path, FixtureMissPolicy.FAIL)
    with pytest.raises(SandboxViolationError, match="miss policy is FAIL"):
        await broker.handle(
            "tool.read", _read("get_user_details", {"user_id": "anya_garcia_5901"}, at)
        )
