"""APPROVAL_CHANGED and RETRIEVAL_CHANGED (issue 16): a counterfactual denial, an approval of
another action, and a candidate retriever returning other chunks or ranks."""

from __future__ import annotations

from models.comparison import compare_trajectories
from models.trajectory import ApprovalFact, RetrievalFact, Trajectory

A = "sha256:" + "a" * 64
B = "sha256:" + "b" * 64


def run(run_id: str, **facts: object) -> Trajectory:
    return Trajectory(run_id=run_id, steps=("retrieve", "approve", "send"), outcome="ok", **facts)


def types(source: Trajectory, replay: Trajectory) -> list[str]:
    return [d.type.value for d in compare_trajectories(source, replay).diffs]


def test_a_counterfactual_denial_is_an_approval_change() -> None:
    source = run(
        "s",
        approvals=(
            ApprovalFact(step_id="approve", action_hash=A, decision="APPROVED", approver="dana"),
        ),
    )
    denied = run(
        "r",
        approvals=(
            ApprovalFact(
                step_id="approve",
                action_hash=A,
                decision="DENIED",
                approver="counterfactual (replay)",
            ),
        ),
    )
    diffs = compare_trajectories(source, denied).diffs
    assert [d.type.value for d in diffs] == ["APPROVAL_CHANGED"]
    assert "APPROVED (dana) became DENIED" in diffs[0].explanation
    other = run(
        "r", approvals=(ApprovalFact(step_id="approve", action_hash=B, decision="APPROVED"),)
    )
    assert types(source, other) == ["APPROVAL_CHANGED"]
    assert types(source, source) == []


def test_a_candidate_retriever_returning_other_chunks_or_ranks() -> None:
    source = run(
        "s",
        retrievals=(
            RetrievalFact(
                step_id="retrieve", query_hash=A, retriever_version="kw-1", chunks=("c1", "c2")
            ),
        ),
    )
    other = run(
        "r",
        retrievals=(
            RetrievalFact(
                step_id="retrieve", query_hash=A, retriever_version="kw-2", chunks=("c3", "c1")
            ),
        ),
    )
    diffs = compare_trajectories(source, other).diffs
    assert [d.type.value for d in diffs] == ["RETRIEVAL_CHANGED"]
    assert "other chunks" in diffs[0].explanation and "kw-2 gave [c3, c1]" in diffs[0].explanation
    reranked = run(
        "r",
        retrievals=(
            RetrievalFact(
                step_id="retrieve", query_hash=A, retriever_version="kw-1", chunks=("c2", "c1")
            ),
        ),
    )
    assert "another ranking" in compare_trajectories(source, reranked).diffs[0].explanation
    assert types(source, source) == []
