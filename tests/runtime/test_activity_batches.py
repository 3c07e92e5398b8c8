"""An automatic activity batch runs up to ``AUTO_BATCH_STEPS`` steps and ends after the step
that passes ``AUTO_BATCH_SECONDS``; an explicit ``steps_per_activity`` is run exactly."""

from __future__ import annotations

import pytest

from examples.synthetic import GRAPH_ID, record_synthetic_run, synthetic_catalog
from models import ReplayMode, replay_flow
from models.replay_flow import ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from tests.runtime.conftest import Recording


async def _first_batch(rec: Recording, **plan: int) -> int:
    run = await record_synthetic_run(rec.ledger, rec.artifacts, 10)
    engine = ReplayEngine(rec.ledger, rec.evidence, rec.artifacts, {GRAPH_ID: synthetic_catalog()})
    replay = ReplayPlan(
        replay_id=f"replay-batch-{run.run_id}",
        source_run_id=run.run_id,
        mode=ReplayMode.RECORDED,
        **plan,
    )
    prepared = await engine.prepare(replay)
    assert prepared.ok, prepared.problems
    assert prepared.start_step is not None
    out = await engine.run_steps(
        StepInput(
            plan=replay,
            step_id=prepared.start_step,
            state_ref=prepared.state_ref,
            cursors=prepared.cursors,
            head=prepared.head,
        )
    )
    return out.steps


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_an_automatic_batch_runs_every_step_within_its_bounds(rec: Recording) -> None:
    assert await _first_batch(rec) == 10  # the whole run: under 100 steps and 2 s


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_an_automatic_batch_ends_once_its_seconds_have_passed(
    rec: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_flow, "AUTO_BATCH_SECONDS", 0.0)
    assert await _first_batch(rec) == 1  # the step that passed them is the batch's last


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_an_explicit_batch_size_is_run_exactly(
    rec: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_flow, "AUTO_BATCH_SECONDS", 0.0)
    assert await _first_batch(rec, steps_per_activity=4) == 4
