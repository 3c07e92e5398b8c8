"""A replay worker never runs steps unsandboxed unless the development flag says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activities.replay import ReplayActivities
from activities.sandbox.config import NO_ISOLATION, SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from activities.sandbox.setup import sandboxed_steps
from bench.synthetic_replay import SyntheticReplays, synthetic_replays
from models import ExecutionEventType
from models.errors import ConfigurationError, SandboxUnavailableError
from models.replay_flow import StepInput
from runtime.env_values import read_section
from tests.fixtures_replay import stack_settings
from worker.temporal import CATALOG_FACTORY as CATALOGS
from worker.temporal import running_workers

MISSING = SandboxSettings(bwrap="/nonexistent/bwrap")


def test_settings_default_to_bubblewrap_and_refuse_unknown_modes() -> None:
    assert read_section(SandboxSettings, {}).isolation == "bubblewrap"
    off = read_section(SandboxSettings, {"REPLAYBOOK_SANDBOX": "off"})
    assert off.isolation == NO_ISOLATION
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_SANDBOX"):
        read_section(SandboxSettings, {"REPLAYBOOK_SANDBOX": "maybe"})
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_SANDBOX_CPU_SECONDS"):
        read_section(SandboxSettings, {"REPLAYBOOK_SANDBOX_CPU_SECONDS": "-1"})


async def test_a_replay_worker_without_bubblewrap_refuses_to_start(
    tmp_path: Path, temporal_client
) -> None:
    settings = stack_settings(tmp_path, "unused").model_copy(update={"sandbox": MISSING})
    with pytest.raises(SandboxUnavailableError, match="not installed"):
        async with running_workers(settings, "replay", temporal_client):
            raise AssertionError("the worker started without a sandbox")


async def _replay_first_step(replays: SyntheticReplays, runner):
    step = await replays.first_step(1)
    return step.plan, await runner.run_steps(step)


async def _isolation_recorded(ledger, replay_id: str) -> list[str]:
    loaded = await ledger.events_with_payloads(
        replay_id, types=frozenset({ExecutionEventType.STEP_STARTED})
    )
    return [json.loads(data)["isolation"] for _, data in loaded]


async def test_the_dev_flag_runs_unsandboxed_and_says_so_in_the_replay(tmp_path: Path) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        engine = replays.engine
        runner = sandboxed_steps(
            engine, MISSING.model_copy(update={"isolation": NO_ISOLATION}), catalog_factory=CATALOGS
        )
        assert runner is None  # no sandbox, by explicit choice
        plan, out = await _replay_first_step(replays, engine)
        assert out.steps == 1
        assert await _isolation_recorded(replays.stores.ledger, plan.replay_id) == [NO_ISOLATION]


async def test_sandboxed_steps_record_bubblewrap_and_a_broken_sandbox_is_an_error(
    tmp_path: Path,
) -> None:
    async with synthetic_replays(stack_settings(tmp_path, "unused").stores, 10) as replays:
        engine, stores = replays.engine, replays.stores
        runner = sandboxed_steps(
            engine, SandboxSettings(warm_processes=0), catalog_factory=CATALOGS
        )
        assert isinstance(runner, SandboxedSteps)
        plan, out = await _replay_first_step(replays, runner)
        assert out.steps == 1 and out.next_step == "s00001"
        assert await _isolation_recorded(stores.ledger, plan.replay_id) == ["bubblewrap"]
        # the sandbox disappears under a running worker: the step is refused, not run bare
        broken = ReplayActivities(engine, SandboxedSteps(engine, MISSING, catalog_factory=CATALOGS))
        with pytest.raises(SandboxUnavailableError):
            await broken.sandboxed.run_steps(  # type: ignore[union-attr]
                StepInput(
                    plan=plan,
                    step_id="s00001",
                    state_ref=out.state_ref,
                    cursors=out.cursors,
                    head=out.head,
                )
            )
        assert await _isolation_recorded(stores.ledger, plan.replay_id) == ["bubblewrap"]
