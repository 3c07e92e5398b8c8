"""Divergence-first fork points: where in a run a changed decision most likely flips the
outcome, ranked from the evidence (pure).

A candidate is a step where the run made a consequential decision: the first divergence of an
earlier replay of the incident (weight 5 per replay that diverged there), a write (4), a policy
denial (4), an approval asked for (3), a reviewer's rejection (3), a tool choice (a tool called in the
step, or asked for by the model in it: 2). Points are ranked by score, then by how early the step
came. A fork replay of a point regenerates the point itself (its ``from_step`` is the point:
history before it, the decision at the point taken again), resuming from the checkpoint of the
step before it (``fork_from``); every step can be a point, the run's first one included (it
has nothing before it: its fork starts from the run's input, ``fork_from`` None).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from models.base import Record
from models.trajectory import Trajectory

WEIGHTS = {
    "first divergence": 5,
    "side effect": 4,
    "policy denial": 4,
    "approval": 3,
    "reviewer rejection": 3,
    "tool choice": 2,
}


class ForkPoint(Record):
    step_id: str
    #: the step whose checkpoint the fork replay resumes from (the step before ``step_id``;
    #: None for the run's first step, whose fork starts from the run's input)
    fork_from: str | None = None
    score: int = Field(ge=1)
    #: why it is a candidate, e.g. ``("side effect", "tool choice")``
    reasons: tuple[str, ...]


class ForkResult(Record):
    """A fork replay of one point with one counterfactual, and how often it reproduced."""

    step_id: str
    label: str
    replay_id: str
    status: str
    reproduced: int | None = None
    runs: int | None = None
    rate: float | None = None


def _is_rejection(content: str | None) -> bool:
    text = (content or "").lower()
    return any(word in text for word in ("reject", "not approved", "denied", "refuse"))


def rank_fork_points(
    source: Trajectory, first_divergences: Iterable[str | None] = ()
) -> list[ForkPoint]:
    """The run's candidate fork points, best first (see the module doc)."""
    reasons: dict[str, list[str]] = {}

    def add(step: str, why: str) -> None:
        reasons.setdefault(step, [])
        reasons[step].append(why)

    for step in first_divergences:
        if step:
            add(step, "first divergence")
    for effect in source.side_effects:
        add(effect.step_id, "side effect")
    for decision in source.policy_decisions:
        if decision.decision == "DENY":
            add(decision.step_id, "policy denial")
        elif decision.decision == "REQUIRE_APPROVAL":
            add(decision.step_id, "approval")
    for call in source.tool_calls:
        add(call.step_id, "tool choice")
    for model in source.model_decisions:
        if model.tool_names:
            add(model.step_id, "tool choice")
        elif "review" in model.step_id and _is_rejection(model.content):
            add(model.step_id, "reviewer rejection")
    order: dict[str, int] = {}
    for i, step in enumerate(source.steps):
        order.setdefault(step, i)
    points = []
    for step, why in reasons.items():
        index = order.get(step)
        if index is None:  # not a step of this run
            continue
        unique = tuple(dict.fromkeys(why))
        score = sum(WEIGHTS[w] * (why.count(w) if w == "first divergence" else 1) for w in unique)
        before = source.steps[index - 1] if index else None
        points.append(ForkPoint(step_id=step, fork_from=before, score=score, reasons=unique))
    points.sort(key=lambda p: (-p.score, order[p.step_id]))
    return points
