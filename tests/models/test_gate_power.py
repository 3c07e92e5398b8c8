"""The regression gate's arithmetic (issue 32, item 4): verdicts from the 95% Wilson interval
against a threshold, the repeats that would decide, and ``--repeat auto`` for a stated power."""

from __future__ import annotations

import pytest

from models.errors import InvalidInputError
from models.gate_power import (
    DEFAULT_THRESHOLD,
    counterfactual_threshold,
    failing_probability,
    gate_verdict,
    repeats_for_power,
    repeats_to_decide,
)


def test_a_few_clean_replays_never_pass() -> None:
    # 0 of n: the upper end 3.84/(n+3.84) reaches 0.10 only at n = 35
    assert [gate_verdict(0, n, 0.10) for n in (1, 2, 5, 34)] == ["INCONCLUSIVE"] * 4
    assert gate_verdict(0, 35, 0.10) == "PASSED"
    assert gate_verdict(0, 0, 0.10) == "INCONCLUSIVE"


def test_a_known_bad_candidate_never_passes_at_any_count() -> None:
    # v17 reproduces in about half the runs: whatever the count, half of them never passes
    for n in range(1, 400):
        assert gate_verdict(n // 2, n, DEFAULT_THRESHOLD) != "PASSED", n
    assert gate_verdict(1, 2, 0.10) == "INCONCLUSIVE"
    assert gate_verdict(2, 2, 0.10) == "FAILED"
    assert gate_verdict(5, 10, 0.10) == "FAILED"


def test_a_counterfactual_threshold_is_met_by_the_same_evidence() -> None:
    # the incident's v18 showed 0/10 (95% upper 0.2775): a candidate's own 0/10 meets it
    threshold = counterfactual_threshold(
        [("exact", 1.0, (0.7225, 1.0)), ("prompt=v18", 0.0, (0.0, 0.2775))], "v18"
    )
    assert threshold == 0.2775
    assert gate_verdict(0, 10, threshold) == "PASSED"
    assert gate_verdict(0, 9, threshold) == "INCONCLUSIVE"


def test_the_threshold_prefers_the_confirmed_fix_then_the_best_counterfactual() -> None:
    rows = [
        ("exact", 0.9, (0.6, 1.0)),
        ("prompt=v19", 0.0, (0.0, 0.16)),
        ("prompt=v18", 0.1, (0.02, 0.4)),
        ("fork@s2 prompt=v18", 0.0, (0.0, 0.1)),
    ]
    assert counterfactual_threshold(rows, "v18") == 0.4
    assert counterfactual_threshold(rows, "v20") == 0.16
    assert counterfactual_threshold([("exact", 1.0, (0.5, 1.0))], None) is None
    assert counterfactual_threshold([("prompt=v18", None, None)], "v18") is None


def test_repeats_to_decide_at_the_observed_rate() -> None:
    assert repeats_to_decide(0, 2, 0.10) == 35  # a clean candidate passes at 35
    n = repeats_to_decide(1, 2, 0.10)  # half: FAILED once the lower end clears 0.10
    assert n is not None and gate_verdict(round(n / 2), n, 0.10) == "FAILED"
    assert gate_verdict(round((n - 1) / 2), n - 1, 0.10) != "FAILED" or n == 2
    # a rate sitting on the threshold is never decided
    assert repeats_to_decide(1, 10, 0.10) is None


def test_repeat_auto_has_the_stated_power() -> None:
    n = repeats_for_power(0.9, 0.5, 0.10)
    assert failing_probability(n, 0.5, 0.10) >= 0.9
    assert gate_verdict(0, n, 0.10) == "PASSED"  # and a clean candidate can pass
    assert n == 35  # here passing needs more than catching: 35 clean replays
    catching = next(m for m in range(1, 100) if failing_probability(m, 0.5, 0.10) >= 0.9)
    assert catching < n
    # a stricter power at a looser threshold: catching decides the count
    strict = repeats_for_power(0.99, 0.5, 0.2775)
    assert failing_probability(strict, 0.5, 0.2775) >= 0.99
    assert failing_probability(strict - 1, 0.5, 0.2775) < 0.99 or strict == 10
    # a rarer regression needs more repeats to catch it
    assert repeats_for_power(0.9, 0.2, 0.10) > repeats_for_power(0.9, 0.5, 0.10)


def test_the_binomial_sum_is_exact_on_a_small_case() -> None:
    # n = 2 at threshold 0.10: only k = 2 (Wilson low 0.342) fails; P = 0.5² at rate 0.5
    assert failing_probability(2, 0.5, 0.10) == pytest.approx(0.25)
    assert failing_probability(2, 1.0, 0.10) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("power", "rate", "threshold", "field"),
    [
        (1.0, 0.5, 0.1, "power"),
        (0.0, 0.5, 0.1, "power"),
        (0.9, 0.0, 0.1, "rate"),
        (0.9, 0.05, 0.1, "rate"),  # at or below the threshold: nothing to catch
        (0.9, 0.5, 1.0, "threshold"),
    ],
)
def test_bad_power_inputs_name_the_field(
    power: float, rate: float, threshold: float, field: str
) -> None:
    with pytest.raises(InvalidInputError) as caught:
        repeats_for_power(power, rate, threshold)
    assert caught.value.field == field
