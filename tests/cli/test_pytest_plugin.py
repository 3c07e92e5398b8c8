"""The pytest plugin's failure text (``cli.pytest_plugin.failure_report``) for every way a
case can fail to pass. A case INCONCLUSIVE only because its clean replays are too few (the
fixed candidate under the default 5 replays) has no stopped replay to name: the report said
IndexError instead of why."""

from __future__ import annotations

from typing import Any

from cli.pytest_plugin import failure_report


def _case(**fields: Any) -> dict[str, Any]:
    return {
        "case_id": "case-INC-tour",
        "incident_id": "INC-tour",
        "passed": False,
        "failures": [],
        "inconclusive": [],
        "reproduced": 0,
        "conclusive": 5,
        "ci95": [0.0, 0.4345],
        "threshold": 0.2775,
        "repeats_to_decide": 10,
        "verdict": "INCONCLUSIVE",
    } | fields


def _report(case: dict[str, Any]) -> str:
    return failure_report({"candidate": {"prompt": "v18"}, "cases": [case], "passed": False})


def test_too_few_clean_replays_say_how_many_would_decide() -> None:
    text = _report(_case())
    assert "case-INC-tour (INC-tour): INCONCLUSIVE (not a pass)" in text
    assert "reproduced 0/5 conclusive (95% Wilson 0.00-0.43; threshold 0.2775)" in text
    assert "about 10 conclusive repeats would decide" in text


def test_a_stopped_replay_is_named() -> None:
    stopped = {
        "replay_id": "regress-1",
        "inconclusive_reason": "FIXTURE_MISS",
        "reason": "no fixture",
    }
    text = _report(_case(conclusive=0, ci95=[0.0, 1.0], inconclusive=[stopped]))
    assert "replay regress-1 stopped: no fixture" in text


def test_a_broken_assertion_is_named() -> None:
    broken = {"assertion": "no email.send to bob", "reason": "email.send is forbidden"}
    text = _report(_case(failures=[broken], reproduced=5, verdict="FAILED"))
    assert "case-INC-tour (INC-tour): no email.send to bob — email.send is forbidden" in text
