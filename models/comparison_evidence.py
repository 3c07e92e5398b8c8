"""Approval, retrieval and prompt differences between a source run and its replay (issue 16):
``APPROVAL_CHANGED`` (a counterfactual denial, or an approval of another action),
``RETRIEVAL_CHANGED`` (a candidate retriever returning other chunks or ranks) and
``PROMPT_DRIFT`` (an EXACT replay's model call whose prompt today's code compiles otherwise).

Pure: facts in, ``(diff, position)`` pairs out; positions index the run's step sequence so the
caller can put them in execution order with the other differences.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

from models.enums import DiffType
from models.replay import TrajectoryDiff
from models.trajectory import ApprovalFact, CandidateFact, PromptDriftFact, RetrievalFact

__all__ = ["approval_diffs", "prompt_drift_diffs", "retrieval_diffs"]


def approval_diffs(
    a: Sequence[ApprovalFact], b: Sequence[ApprovalFact], pa: Sequence[int], pb: Sequence[int]
) -> list[tuple[TrajectoryDiff, int]]:
    """Each replay approval whose action the source also had approved, with another decision;
    else one at a step where the source approved another action. An approval only one side
    asked for, at a step the other did not reach, is left to the tool and side-effect diffs."""
    found: list[tuple[TrajectoryDiff, int]] = []
    by_action = {fact.action_hash: i for i, fact in enumerate(a)}
    by_step = {fact.step_id: i for i, fact in enumerate(a)}
    for j, rep in enumerate(b):
        i = by_action.get(rep.action_hash)
        if i is not None:
            src = a[i]
            if src.decision == rep.decision:
                continue
            text = (
                f"the approval of the same action at {src.step_id}: {src.decision} "
                f"({src.approver}) became {rep.decision} ({rep.approver})"
            )
        elif rep.step_id in by_step:
            i = by_step[rep.step_id]
            src = a[i]
            text = (
                f"at {src.step_id} the replay asked approval for another action "
                f"({rep.action_hash[:19]}…, {rep.decision}) than the source "
                f"({src.action_hash[:19]}…, {src.decision})"
            )
        else:
            continue
        diff = TrajectoryDiff(
            type=DiffType.APPROVAL_CHANGED,
            source_step=src.step_id,
            replay_step=rep.step_id,
            explanation=text,
        )
        found.append((diff, pa[i] if i < len(pa) else pb[j]))
    return found


def _shown(fact: RetrievalFact) -> str:
    return ", ".join(fact.chunks) or "no chunks"


def retrieval_diffs(
    a: Sequence[RetrievalFact], b: Sequence[RetrievalFact], pa: Sequence[int], pb: Sequence[int]
) -> list[tuple[TrajectoryDiff, int]]:
    """Retrievals paired in order at the same step: other chunks, another ranking or another
    retriever version is a ``RETRIEVAL_CHANGED`` naming both results."""
    found: list[tuple[TrajectoryDiff, int]] = []
    unused: dict[str, deque[int]] = defaultdict(deque)  # per step, its source retrievals in order
    for k, src in enumerate(a):
        unused[src.step_id].append(k)
    for j, rep in enumerate(b):
        queue = unused.get(rep.step_id)
        if not queue:
            continue
        i = queue.popleft()
        src = a[i]
        if (src.chunks, src.retriever_version) == (rep.chunks, rep.retriever_version):
            continue
        what = "other chunks" if set(src.chunks) != set(rep.chunks) else "another ranking"
        text = (
            f"retrieval at {src.step_id} returned {what}: {src.retriever_version} gave "
            f"[{_shown(src)}], {rep.retriever_version} gave [{_shown(rep)}]"
        )
        diff = TrajectoryDiff(
            type=DiffType.RETRIEVAL_CHANGED,
            source_step=src.step_id,
            replay_step=rep.step_id,
            explanation=text,
        )
        found.append((diff, pa[i] if i < len(pa) else pb[j]))
    return found


def prompt_drift_diffs(drifts: Sequence[PromptDriftFact]) -> list[TrajectoryDiff]:
    """One ``PROMPT_DRIFT`` per model call whose recorded compiled prompt (the one the replay
    sent) differs from today's compilation: both hashes and the unified diff. Not a
    behavioural divergence (the model was sent the recording), so it takes no part in the
    first divergent step; it lowers the replay's confidence instead."""
    return [
        TrajectoryDiff(
            type=DiffType.PROMPT_DRIFT,
            source_step=drift.step_id,
            replay_step=drift.step_id,
            explanation=(
                f"today's code compiles the prompt of {drift.template or drift.step_id} at "
                f"{drift.step_id} differently: recorded {drift.recorded_hash[:19]}…, "
                f"recompiled {drift.recompiled_hash[:19]}… (the recorded prompt was sent)"
            ),
            source_prompt_hash=drift.recorded_hash,
            replay_prompt_hash=drift.recompiled_hash,
            prompt_diff=drift.diff,
        )
        for drift in drifts
    ]


def candidate_diffs(candidates: Sequence[CandidateFact]) -> list[TrajectoryDiff]:
    """One ``CANDIDATE_CHANGED`` per candidate the replay was given (a tool-loop run's system
    prompt or tool catalogue): both digests and the unified diff, source → candidate. What the
    replay was given, not a divergence: it takes no part in the first divergent step."""
    names = {"system_prompt": "system prompt", "tools": "tool catalogue"}
    return [
        TrajectoryDiff(
            type=DiffType.CANDIDATE_CHANGED,
            explanation=(
                f"candidate {names.get(c.kind, c.kind)}: {c.candidate_hash[:19]}… instead of "
                f"the recorded {(c.source_hash or 'none')[:19]}…"
            ),
            source_prompt_hash=c.source_hash,
            replay_prompt_hash=c.candidate_hash,
            prompt_diff=c.diff or None,
        )
        for c in candidates
    ]
