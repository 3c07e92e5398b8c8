"""Three verdicts (issue 16): what stops a replay early makes it INCONCLUSIVE, never a run
where the failure did not happen."""

from __future__ import annotations

from models.completeness import completeness_text
from models.enums import InconclusiveReason, ReplayMode, ReplayStatus, ReplayVerdict
from models.replay_flow import ReplayOutcome
from models.verdicts import (
    failure_verdict,
    outcome_summary,
    stop_verdict,
    summary_line,
    verdict_summary,
)

MISS = (
    "FixtureMissError: fixture miss at step planner for capability crm.search_customers: "
    "no recorded fixture"
)


def test_a_replay_stopped_early_is_inconclusive_with_its_reason() -> None:
    miss = stop_verdict(MISS, reproduced=False)
    assert miss.verdict is ReplayVerdict.INCONCLUSIVE
    assert miss.inconclusive_reason is InconclusiveReason.FIXTURE_MISS
    assert miss.reason is not None and "at step planner for capability crm.search_customers" in (
        miss.reason
    )
    budget = stop_verdict("budget: max_model_calls 3 reached (3 calls)", reproduced=False)
    assert budget.inconclusive_reason is InconclusiveReason.BUDGET
    assert "max_model_calls" in (budget.reason or "")
    assert stop_verdict("BudgetExhaustedError: max_tokens", True).inconclusive_reason is (
        InconclusiveReason.BUDGET
    )
    quota = stop_verdict("SandboxQuotaError: bytes written", False)
    assert quota.inconclusive_reason is InconclusiveReason.SANDBOX_VIOLATION


def test_a_finished_or_refused_replay_is_conclusive() -> None:
    assert stop_verdict(None, True).verdict is ReplayVerdict.REPRODUCED
    assert stop_verdict(None, False).verdict is ReplayVerdict.NOT_REPRODUCED
    # a refused action is the governed agent's behaviour: the comparison decides
    refused = stop_verdict("PolicyDeniedError: policy denies payments.refund", False)
    assert refused.verdict is ReplayVerdict.NOT_REPRODUCED


def test_failures_are_inconclusive() -> None:
    assert failure_verdict("SandboxViolationError", "step x failed").inconclusive_reason is (
        InconclusiveReason.SANDBOX_VIOLATION
    )
    assert failure_verdict("ValueError", "boom").inconclusive_reason is (
        InconclusiveReason.STEP_ERROR
    )
    assert failure_verdict(None, "gone", preparing=True).inconclusive_reason is (
        InconclusiveReason.PREPARING
    )


def test_rate_and_interval_are_over_conclusive_runs_and_null_without_any() -> None:
    miss = stop_verdict(MISS, False)
    none = verdict_summary([miss] * 5)
    assert none == {
        "reproduced": 0,
        "not_reproduced": 0,
        "inconclusive": 5,
        "runs": 5,
        "rate": None,
        "ci95": None,
        "inconclusive_reasons": {"FIXTURE_MISS": 5},
    }
    assert "rate not established" in summary_line(none)
    mixed = verdict_summary([miss, stop_verdict(None, True), stop_verdict(None, False)])
    assert mixed["rate"] == 0.5 and mixed["runs"] == 3 and mixed["inconclusive"] == 1
    assert mixed["ci95"] is not None and mixed["ci95"][0] < 0.5 < mixed["ci95"][1]
    assert "reproduced 1/2 conclusive" in summary_line(mixed)
    assert "inconclusive 1/3 (FIXTURE_MISS 1)" in summary_line(mixed)


def test_outcomes_from_before_verdicts_are_read_honestly() -> None:
    base = {"replay_id": "r", "source_run_id": "s", "mode": ReplayMode.EXACT}
    old_parent = ReplayOutcome(
        **base,
        status=ReplayStatus.COMPLETED,
        summary={"reproduced": 2, "runs": 4, "rate": 0.5, "ci95": [0.15, 0.85]},
    )
    assert outcome_summary(old_parent)["not_reproduced"] == 2
    stopped = ReplayOutcome(
        **base, status=ReplayStatus.COMPLETED, reproduced=False, reason="budget: max_tokens 10"
    )
    assert outcome_summary(stopped)["inconclusive_reasons"] == {"BUDGET": 1}
    failed = ReplayOutcome(**base, status=ReplayStatus.FAILED, reason="step a failed: x")
    assert outcome_summary(failed)["inconclusive"] == 1


def test_the_seeds_prompt_swap_from_a_step_is_a_valid_plan() -> None:
    from models.replay_plans import build_replay_plan

    plan = build_replay_plan(
        "run-9182",
        ReplayMode.PROMPT_SWAP,
        replay_id="r1",
        sampling_seed=1,
        prompt="v18",
        from_step="planner",
    )
    assert plan.mode is ReplayMode.PROMPT_SWAP and plan.from_step == "planner"


def test_environment_drift_names_the_changed_keys() -> None:
    from models import EnvironmentManifest, SourceCodeManifest
    from models.verdicts import manifest_drift

    recorded = EnvironmentManifest(
        python_version="3.11.9", os_image="Debian", tool_bundle_hash=None
    )
    now = EnvironmentManifest(python_version="3.12.1", os_image="Debian", tool_bundle_hash=None)
    assert manifest_drift(recorded, now, "environment") == ["environment.python_version"]
    assert manifest_drift(recorded, recorded, "environment") == []
    assert manifest_drift(None, now, "environment") == []
    code = manifest_drift(
        SourceCodeManifest(head_commit="a" * 40),
        SourceCodeManifest(head_commit="b" * 40),
        "source_code",
    )
    assert code == ["source_code.head_commit"]


def test_an_incident_replay_row_counts_over_its_conclusive_runs() -> None:
    """The row ``incident status`` prints: 2 runs, both inconclusive, is not "0/2"."""
    row = {
        "reproduced": 0,
        "not_reproduced": 0,
        "inconclusive": 2,
        "runs": 2,
        "rate": None,
        "ci95": None,
        "inconclusive_reasons": {"FIXTURE_MISS": 2},
    }
    line = summary_line(row)
    assert line.startswith("reproduced 0/0 conclusive (rate not established")
    assert "inconclusive 2/2 (FIXTURE_MISS 2)" in line and "0/2" not in line
    # a row whose not_reproduced is recorded as null is derived from the counts
    assert summary_line({**row, "not_reproduced": None, "reproduced": 1, "inconclusive": 0})
    assert "reproduced 1/2 conclusive" in summary_line(
        {
            **row,
            "not_reproduced": None,
            "reproduced": 1,
            "inconclusive": 0,
            "rate": 0.5,
            "ci95": [0.1, 0.9],
        }
    )


def test_completeness_never_says_missing_at_full_score() -> None:
    destroyed = "raw content of 3 payload(s) destroyed by deletion request DSR-1 at T"
    assert completeness_text(6, 6, ()) == "6/6"
    assert completeness_text(6, 6, (destroyed,)) == f"6/6; {destroyed}"
    assert completeness_text(5, 6, ("environment", destroyed)) == (
        f"5/6 (missing: environment); {destroyed}"
    )
