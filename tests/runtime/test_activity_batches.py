"""An automatic activity batch runs up to ``AUTO_BATCH_STEPS`` steps and ends after the step
that passes ``AUTO_BATCH_SECONDS``; an explicit ``steps_per_activity`` is run exactly; a
replay with a time limit runs whole batches, each ending at the replay's deadline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from examples.synthetic import GRAPH_ID, record_synthetic_run, synthetic_catalog
from models import ReplayMode, replay_flow
from models.replay import ReplayBudget
from models.replay_flow import ReplayPlan, StepInput
from runtime.replay.engine import ReplayEngine
from tests.runtime.conftest import Recording


async def _first_batch(rec: Recording, deadline: datetime | None = None, **plan: Any) -> int:
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
            deadline=deadline,
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


TIME_LIMIT: dict[str, Any] = {"budget": ReplayBudget(max_duration=timedelta(minutes=10))}


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_time_limited_batch_runs_every_step_before_its_deadline(rec: Recording) -> None:
    # an incident's children each have a share of its time: whole batches, not one step each
    later = datetime.now(UTC) + timedelta(minutes=10)
    assert await _first_batch(rec, deadline=later, **TIME_LIMIT) == 10


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_time_limited_batch_ends_at_its_deadline(rec: Recording) -> None:
    # past the deadline after its first step: the workflow stops the replay next
    passed = datetime.now(UTC) - timedelta(seconds=1)
    assert await _first_batch(rec, deadline=passed, **TIME_LIMIT) == 1


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_time_limited_step_without_a_deadline_runs_alone(rec: Recording) -> None:
    # scheduled by a workflow from before deadlines: it checks the limit between activities
    assert await _first_batch(rec, **TIME_LIMIT) == 1
