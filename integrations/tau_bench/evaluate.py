"""``forensics evaluate``: how well the ground-truth comparison predicts the recorded verdicts.

Agreement is measured against the reward the benchmark recorded; localisation against human
failure annotations (AgentRx): does the first divergent message we name equal the annotated
root-cause step, exactly and within ±1 and ±2 messages, and is the predicted category
(``integrations.tau_bench.agentrx``) the annotated one, compared with the baseline "the first write whose
output starts with Error:" (that write's message, category Invalid Invocation)?

The annotated runs are also split in two halves by a hash of their task id (``held_out``:
even digest), fixed before any rule was written: the rules must not be tuned to the
annotations, and a figure on the held-out half shows whether they were.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from integrations.tau_bench.forensics import ExpectedComparison, ForensicsRun, compare_expected

__all__ = ["Annotation", "annotations_from_agentrx", "evaluate_runs", "held_out", "localization"]

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


def held_out(task_id: str) -> bool:
    """The fixed half of the annotated runs kept out of rule design."""
    return int(hashlib.sha256(task_id.encode()).hexdigest(), 16) % 2 == 0


BASELINE_CATEGORY = "Invalid Invocation"


def _scores(rows: list[tuple[ExpectedComparison, Annotation]]) -> dict[str, Any]:
    n = len(rows)

    def rate(hits: Iterable[bool]) -> float | None:
        return round(sum(hits) / n, 4) if n else None

    ours = [(c.first_divergent_message_index, note) for c, note in rows]
    base = [(c.first_error_write_index, note) for c, note in rows]
    return {
        "runs": n,
        "exact": rate(_hit(i, a.root_cause_index, 0) for i, a in ours),
        "within_1": rate(_hit(i, a.root_cause_index, 1) for i, a in ours),
        "within_2": rate(_hit(i, a.root_cause_index, LOCALIZATION_WINDOW) for i, a in ours),
        "category": rate(c.category == a.category for c, a in rows),
        "baseline_exact": rate(_hit(i, a.root_cause_index, 0) for i, a in base),
        "baseline_within_1": rate(_hit(i, a.root_cause_index, 1) for i, a in base),
        "baseline_within_2": rate(
            _hit(i, a.root_cause_index, LOCALIZATION_WINDOW) for i, a in base
        ),
        "baseline_category": rate(
            (BASELINE_CATEGORY if c.first_error_write_index is not None else None) == a.category
            for c, a in rows
        ),
    }


def localization(
    comparisons: Iterable[ExpectedComparison], annotations: dict[str, Annotation]
) -> dict[str, Any] | None:
    """Step (exact, ±1, ±2) and category accuracy of ours and of the Error: baseline, on the
    annotated failed runs, all of them and the held-out half."""
    rows = []
    for c in comparisons:
        note = annotations.get(c.task_id)
        if note is None or c.domain != "retail" or c.recorded_reward != 0.0:
            continue
        rows.append((c, note))
    if not rows:
        return None
    return {
        **_scores(rows),
        "held_out": _scores([r for r in rows if held_out(r[0].task_id)]),
        "development": _scores([r for r in rows if not held_out(r[0].task_id)]),
        "per_run": [
            {
                "run_id": c.run_id,
                "annotated": note.root_cause_index,
                "ours": c.first_divergent_message_index,
                "baseline": c.first_error_write_index,
                "annotated_category": note.category,
                "category": c.category,
                "held_out": held_out(c.task_id),
            }
            for c, note in rows
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
