"""``forensics evaluate``: how well the ground-truth comparison predicts the recorded verdicts.

Agreement is measured against the reward the benchmark recorded; localisation against human
failure annotations (AgentRx): does the first divergent message we name equal the annotated
root-cause step, exactly and within ±2 messages, compared with the baseline "the first write
whose output starts with Error:"?
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from models.forensics import ExpectedComparison, ForensicsRun, compare_expected

__all__ = ["Annotation", "annotations_from_agentrx", "evaluate_runs", "localization"]

LOCALIZATION_WINDOW = 2


class Annotation(BaseModel):
    """A human's root-cause step for a failed run (0-based message index)."""

    task_id: str
    root_cause_index: int
    category: str | None = None


def annotations_from_agentrx(document: list[dict[str, Any]]) -> dict[str, Annotation]:
    """AgentRx annotations: ``step_number`` is the 1-based message ``index``."""
    out: dict[str, Annotation] = {}
    for item in document:
        root = (item.get("root_cause") or {}).get("failure_id")
        failure = next((f for f in item.get("failures", []) if f.get("failure_id") == root), None)
        if failure is None or failure.get("step_number") is None:
            continue
        out[str(item["trajectory_id"])] = Annotation(
            task_id=str(item["trajectory_id"]),
            root_cause_index=int(failure["step_number"]) - 1,
            category=failure.get("failure_category"),
        )
    return out


def _hit(index: int | None, gold: int, window: int) -> bool:
    return index is not None and abs(index - gold) <= window


def localization(
    comparisons: Iterable[ExpectedComparison], annotations: dict[str, Annotation]
) -> dict[str, Any] | None:
    """Exact and ±2 hit rates of our divergence and of the Error: baseline, on annotated runs."""
    rows = []
    for c in comparisons:
        note = annotations.get(c.task_id)
        if note is None or c.domain != "retail" or c.recorded_reward != 0.0:
            continue
        rows.append((c, note.root_cause_index))
    if not rows:
        return None
    n = len(rows)

    def rate(pick: Any, window: int) -> float:
        return round(sum(_hit(pick(c), gold, window) for c, gold in rows) / n, 4)

    ours = lambda c: c.first_divergent_message_index  # noqa: E731
    baseline = lambda c: c.first_error_write_index  # noqa: E731
    return {
        "runs": n,
        "exact": rate(ours, 0),
        "within_2": rate(ours, LOCALIZATION_WINDOW),
        "baseline_exact": rate(baseline, 0),
        "baseline_within_2": rate(baseline, LOCALIZATION_WINDOW),
        "per_run": [
            {
                "run_id": c.run_id,
                "annotated": gold,
                "ours": c.first_divergent_message_index,
                "baseline": c.first_error_write_index,
            }
            for c, gold in rows
        ],
    }


def evaluate_runs(
    runs: Iterable[ForensicsRun],
    annotations: dict[str, Annotation] | None = None,
    world: Any = None,
) -> dict[str, Any]:
    """Agreement of the predicted outcome with the recorded reward, failure signatures, and
    localisation. ``world`` (optional) is a callable ForensicsRun -> bool | None."""
    comparisons = []
    for run in runs:
        state = world(run) if world is not None else None
        comparisons.append(compare_expected(run, world_state_matches=state))
    scored = [c for c in comparisons if c.recorded_reward is not None]
    disagreeing = [c for c in scored if c.predicted_reward != c.recorded_reward]
    failed = [c for c in comparisons if c.predicted_reward == 0.0 and c.signature]
    signatures = Counter(c.signature for c in failed)
    keys = Counter(c.signature_key for c in failed)
    per_domain: dict[str, Counter[str]] = {}
    for c in failed:
        if c.signature:  # always (see ``failed``): narrows ``str | None``
            per_domain.setdefault(c.domain, Counter())[c.signature] += 1
    by_domain: dict[str, dict[str, int]] = {}
    for c in scored:
        d = by_domain.setdefault(c.domain, {"runs": 0, "agree": 0, "recorded_pass": 0})
        d["runs"] += 1
        d["agree"] += c.predicted_reward == c.recorded_reward
        d["recorded_pass"] += c.recorded_reward == 1.0
    return {
        "runs": len(comparisons),
        "scored_runs": len(scored),
        "agreement": round((len(scored) - len(disagreeing)) / len(scored), 4) if scored else None,
        "disagreeing_run_ids": [c.run_id for c in disagreeing],
        "disagreements": [
            {
                "run_id": c.run_id,
                "recorded_reward": c.recorded_reward,
                "predicted_reward": c.predicted_reward,
                "signature_key": c.signature_key,
            }
            for c in disagreeing
        ],
        "writes_executed": sum(c.writes_executed for c in comparisons),
        "writes_failed": sum(c.writes_failed for c in comparisons),
        "by_domain": by_domain,
        "duplicates": {
            "runs": sum(1 for c in comparisons if c.findings),
            "findings": sum(len(c.findings) for c in comparisons),
            "run_ids": [c.run_id for c in comparisons if c.findings],
        },
        "signatures": dict(signatures.most_common()),
        "signatures_by_domain": {d: dict(n.most_common()) for d, n in sorted(per_domain.items())},
        "signature_keys": dict(keys.most_common()),
        "localization": localization(comparisons, annotations or {}),
    }
