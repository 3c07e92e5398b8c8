"""Divergence-first replays: an incident ranks fork points from its evidence and fork-replays
the top K with each counterfactual (real Temporal, real workers, sandboxed replays)."""

from __future__ import annotations

import pytest

from app.incidents import new_incident_request
from models import FixtureMissPolicy
from models.errors import InvalidInputError
from models.incident_flow import Counterfactual, IncidentPhase
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run


async def test_the_top_fork_points_are_replayed_with_each_counterfactual(replay_stack) -> None:
    stack = replay_stack
    run_id = await wrong_customer_run(stack)
    handle = await open_incident(
        stack,
        run_id,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        repeat=2,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
        fork_points=2,
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION, deadline_s=300)
    points = view.fork_points
    assert len(points) >= 2 and points[0].score >= points[1].score
    # the wrong e-mail is a write: it is a candidate, with the step it resumes from
    email = next(p for p in points if p.step_id == "email")
    assert "side effect" in email.reasons and email.fork_from
    forked = {f.step_id for f in view.fork_results}
    assert forked == {p.step_id for p in points[:2]}
    # divergence first: the fork replays ran before the whole-run counterfactual
    labels = [r.label for r in view.replays]
    assert labels[0] == "exact" and labels[-1] == "prompt=v18", labels
    assert all(label.startswith("fork@") for label in labels[1:-1]) and len(labels) == 4
    assert all(f.label.endswith("prompt=v18") for f in view.fork_results)
    done = [f for f in view.fork_results if f.status == "COMPLETED"]
    assert done and all(f.runs == 2 for f in done)
    # the fork replays are replays of the incident, so a confirmation may cite them
    assert {f.replay_id for f in done} <= {r.replay_id for r in view.replays}
    # PROMPT contributes: the exact replay reproduced and prompt v18 never did
    if view.replays[0].reproduced and view.replays[-1].reproduced == 0:
        assert view.signature is not None
        assert "PROMPT_SWAP_FIXES" in view.signature.contributing
    await handle.terminate("test done")


async def test_fork_first_forks_every_point_instead_of_the_whole_run(replay_stack) -> None:
    """``fork_first``: the fork replays instead of the whole-run counterfactuals; the run's
    first step is a fork point too, and v18 regenerating the planner no longer e-mails the
    wrong customer."""
    stack = replay_stack
    run_id = await wrong_customer_run(stack)
    handle = await open_incident(
        stack,
        run_id,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        repeat=2,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
        fork_points=20,
        fork_first=True,
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION, deadline_s=300)
    labels = [r.label for r in view.replays]
    assert labels[0] == "exact" and "prompt=v18" not in labels, labels
    planner = next(p for p in view.fork_points if p.step_id == "planner")
    assert planner.fork_from is None
    result = next(f for f in view.fork_results if f.step_id == "planner")
    assert result.status == "COMPLETED" and result.runs == 2 and result.reproduced == 0, result
    await handle.terminate("test done")


def test_fork_first_needs_fork_points() -> None:
    with pytest.raises(InvalidInputError, match="--fork-first needs --fork-points") as refused:
        new_incident_request(
            "run-1", [], fork_first=True, fork_names=("--fork-first", "--fork-points")
        )
    assert refused.value.field == "--fork-first"
