"""Evidence completeness (rule 14): six items, each present or named as missing."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from models.base import Record
from models.enums import ReplayConfidence

ITEMS = ("prompt", "context", "tool_fixtures", "policy", "approvals", "environment")


class CompletenessFacts(Record):
    """Counts gathered from a recorded run (by the stores), judged here."""

    model_calls: int = Field(default=0, ge=0)
    model_calls_with_prompt: int = Field(default=0, ge=0)
    model_calls_with_context: int = Field(default=0, ge=0)
    tool_calls: int = Field(default=0, ge=0)
    tool_calls_with_fixture: int = Field(default=0, ge=0)
    write_actions: int = Field(default=0, ge=0)
    write_actions_with_policy: int = Field(default=0, ge=0)
    policy_version_pinned: bool = False
    approvals_required: int = Field(default=0, ge=0)
    approvals_recorded: int = Field(default=0, ge=0)
    environment_recorded: bool = False


class EvidenceCompleteness(Record):
    score: int
    total: int = len(ITEMS)
    present: tuple[str, ...]
    missing: tuple[str, ...]
    #: why each missing item is missing
    reasons: dict[str, str] = Field(default_factory=dict)

    @property
    def confidence(self) -> ReplayConfidence:
        return ReplayConfidence.FULL if self.score == self.total else ReplayConfidence.LIMITED

    def summary(self) -> str:
        return completeness_text(self.score, self.total, self.missing)


def completeness_text(score: int, total: int, missing: Sequence[str]) -> str:
    """``5/6 (missing: environment)``; a note that is not one of the six items (raw content a
    deletion destroyed) follows after ``;``, so a 6/6 never says "missing"."""
    items = [m for m in missing if m in ITEMS]
    notes = [m for m in missing if m not in ITEMS]
    text = f"{score}/{total}" + (f" (missing: {', '.join(items)})" if items else "")
    return "; ".join([text, *notes])


def score_completeness(facts: CompletenessFacts) -> EvidenceCompleteness:
    """Score the six items; an item with nothing to cover (no model call) counts as present."""
    problems: dict[str, str] = {}
    if facts.model_calls_with_prompt < facts.model_calls:
        problems["prompt"] = (
            f"{facts.model_calls - facts.model_calls_with_prompt} of {facts.model_calls} model calls "
            "have no retrievable compiled prompt"
        )
    if facts.model_calls_with_context < facts.model_calls:
        problems["context"] = (
            f"{facts.model_calls - facts.model_calls_with_context} of {facts.model_calls} model calls "
            "have no context snapshot"
        )
    if facts.tool_calls_with_fixture < facts.tool_calls:
        problems["tool_fixtures"] = (
            f"{facts.tool_calls - facts.tool_calls_with_fixture} of {facts.tool_calls} tool calls have no fixture"
        )
    if not facts.policy_version_pinned:
        problems["policy"] = "no policy version pinned"
    elif facts.write_actions_with_policy < facts.write_actions:
        problems["policy"] = (
            f"{facts.write_actions - facts.write_actions_with_policy} of {facts.write_actions} writes "
            "have no recorded policy decision"
        )
    if facts.approvals_recorded < facts.approvals_required:
        problems["approvals"] = (
            f"{facts.approvals_required - facts.approvals_recorded} of {facts.approvals_required} "
            "required approvals are not recorded"
        )
    if not facts.environment_recorded:
        problems["environment"] = "no environment manifest"
    present = tuple(i for i in ITEMS if i not in problems)
    return EvidenceCompleteness(
        score=len(present),
        present=present,
        missing=tuple(i for i in ITEMS if i in problems),
        reasons=problems,
    )
