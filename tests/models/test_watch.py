"""The recurrence watch's rules (models.watch): fix version, recurrence, counting (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from models.execution import PinnedVersions, RunRecord
from models.watch import WatchCounts, WatchedRun, advance, carries_fix, recurred

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def run(**changes: object) -> RunRecord:
    base: dict[str, object] = {
        "run_id": "r1",
        "graph_id": "support-desk",
        "graph_version": "1",
        "created_at": T0,
    }
    return RunRecord.model_validate({**base, **changes})


def test_a_run_carries_the_fix_by_version_label_or_prompt_bundle() -> None:
    assert carries_fix(run(), "v18", ["v18/planner", "v18/writer"])
    assert not carries_fix(run(), "v18", ["v17/planner"])
    assert carries_fix(run(labels={"release": "payments-client-2"}), "payments-client-2")
    assert carries_fix(run(pinned=PinnedVersions(policy_version="p-3")), "p-3")
    assert carries_fix(run(graph_version="7"), "7")


def test_recurrence_needs_a_telling_signature_or_a_failing_case() -> None:
    sig = "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    assert recurred(sig, sig, case_failed=False)
    assert not recurred("MODEL_DECISION_UNEXPLAINED", "MODEL_DECISION_UNEXPLAINED", False)
    assert recurred("MODEL_DECISION_UNEXPLAINED", "MODEL_DECISION_UNEXPLAINED", True)
    assert not recurred("MODEL_DECISION_UNEXPLAINED", sig, False)


def test_counts_advance_with_a_cursor_that_keeps_ties() -> None:
    counts = WatchCounts(started_at=T0)
    a = WatchedRun(run_id="a", created_at=T0, carries_fix=True, recurred=False)
    b = WatchedRun(run_id="b", created_at=T0 + timedelta(1), carries_fix=False, recurred=False)
    c = WatchedRun(run_id="c", created_at=T0 + timedelta(1), carries_fix=True, recurred=True)
    counts = advance(counts, [a, b])
    assert (counts.runs_seen, counts.runs_with_fix, counts.recurrences) == (2, 1, 0)
    assert counts.cursor == T0 + timedelta(1) and counts.seen_at_cursor == ("b",)
    counts = advance(counts, [c])
    assert counts.seen_at_cursor == ("b", "c") and counts.recurred_run_ids == ("c",)
    assert (counts.runs_with_fix, counts.recurrences) == (2, 1)
    assert advance(counts, []) == counts
