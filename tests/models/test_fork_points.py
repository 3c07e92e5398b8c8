"""Divergence-first fork points ranked from a run's evidence (pure)."""

from __future__ import annotations

from models.fork_points import rank_fork_points
from models.trajectory import ModelDecision, PolicyFact, SideEffectFact, Trajectory


def run() -> Trajectory:
    return Trajectory(
        run_id="r",
        steps=("planner", "search", "crm", "reviewer", "refund", "email"),
        model_decisions=(
            ModelDecision(step_id="planner", tool_names=("crm.find_by_phone",)),
            ModelDecision(step_id="crm", tool_names=("crm.find_by_phone",)),
            ModelDecision(step_id="reviewer", content="Rejected: the amount is above the limit"),
        ),
        side_effects=(
            SideEffectFact(
                step_id="refund",
                capability_id="payment.refund",
                action_hash="a",
                status="CONFIRMED",
            ),
            SideEffectFact(
                step_id="email", capability_id="email.send", action_hash="b", status="CONFIRMED"
            ),
        ),
        policy_decisions=(
            PolicyFact(
                step_id="refund", policy_id="p", input_hash="a", decision="REQUIRE_APPROVAL"
            ),
        ),
    )


def test_points_are_ranked_by_evidence_and_forked_from_the_step_before() -> None:
    points = rank_fork_points(run(), ["email", "email", None])
    assert [p.step_id for p in points] == ["email", "refund", "reviewer", "planner", "crm"]
    email, refund, reviewer, planner, crm = points
    assert email.score == 5 * 2 + 4 and email.reasons == ("first divergence", "side effect")
    assert email.fork_from == "refund"
    assert refund.score == 4 + 3 and refund.fork_from == "reviewer"
    assert reviewer.reasons == ("reviewer rejection",) and crm.reasons == ("tool choice",)
    # the first step is a point too (issue 30): its fork starts from the run's input
    assert planner.reasons == ("tool choice",) and planner.fork_from is None


def test_no_evidence_no_points() -> None:
    assert rank_fork_points(Trajectory(run_id="r", steps=("a", "b"))) == []
    # a divergence at a step the run does not have is not a point
    assert rank_fork_points(Trajectory(run_id="r", steps=("a", "b")), ["zzz"]) == []
