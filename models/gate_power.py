"""Regression gates with stated power: when a candidate passes, fails or leaves a case
undecided, and how many repeats decide.

A gate replays a case ``n`` times with the candidate; ``k`` of the conclusive replays break an
assertion (the incident reproduced). The case has a *threshold*: the reproduction rate the
candidate may show at most (by default the rate the incident's counterfactual showed, taken at
the upper end of its 95 % interval, or ``DEFAULT_THRESHOLD``). With the two-sided 95 % Wilson
score interval ``[low, high]`` of ``k / n`` (``models.statistics.wilson_interval``):

* ``PASSED`` when ``high <= threshold``: the rate is shown to be at most the threshold;
* ``FAILED`` when ``low > threshold``: the rate is shown to be above it (a regression);
* ``INCONCLUSIVE`` otherwise, with the number of conclusive repeats that would decide if the
  observed rate held (``repeats_to_decide``).

So a few lucky replays never pass a known-bad candidate: with no reproduction at all, ``high``
is ``z² / (n + z²)``, at or below 10 % only from n = 35 on.

``repeats_for_power``: the count ``--repeat auto`` picks. A regression that reproduces at
``rate`` is FAILED with probability at least ``power`` (the exact binomial sum), and a
candidate that never reproduces can pass (``high(0, n) <= threshold``); the larger of the two.

Pure: arithmetic only.
"""

from __future__ import annotations

from collections.abc import Iterable
from math import exp, isfinite, lgamma, log
from typing import Literal

from models.errors import InvalidInputError
from models.statistics import wilson_interval

__all__ = [
    "DEFAULT_THRESHOLD",
    "GateVerdict",
    "counterfactual_threshold",
    "gate_verdict",
    "repeats_for_power",
    "repeats_to_decide",
]

#: the reproduction rate a candidate may show when the incident's counterfactual gives none
DEFAULT_THRESHOLD = 0.10
#: the interval a gate decides with (named in every result)
INTERVAL = "wilson-95"
#: the most repeats a search looks at (past it: "more than this")
MAX_REPEATS = 100_000

GateVerdict = Literal["PASSED", "FAILED", "INCONCLUSIVE"]


def _probability(name: str, value: float, *, low_open: bool, high_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not isfinite(value):
        raise InvalidInputError(f"{name} must be a number, not {value!r}", field=name)
    if (value <= 0 if low_open else value < 0) or (value >= 1 if high_open else value > 1):
        bounds = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise InvalidInputError(f"{name} must be in {bounds}, not {value}", field=name)
    return float(value)


def gate_verdict(reproduced: int, runs: int, threshold: float) -> GateVerdict:
    """The case's verdict from ``reproduced`` of ``runs`` conclusive replays (no run:
    INCONCLUSIVE)."""
    threshold = _probability("threshold", threshold, low_open=False, high_open=True)
    if runs == 0:
        return "INCONCLUSIVE"
    # to the 4 places intervals are recorded with: a counterfactual's 0/10 (upper 0.2775) is
    # the threshold a candidate's own 0/10 meets
    low, high = (round(b, 4) for b in wilson_interval(reproduced, runs))
    if high <= threshold:
        return "PASSED"
    if low > threshold:
        return "FAILED"
    return "INCONCLUSIVE"


def repeats_to_decide(reproduced: int, runs: int, threshold: float) -> int | None:
    """The fewest conclusive replays (in all, ``runs`` included) that would decide the case if
    the observed rate held (no run yet: as if none reproduced); None when no count up to
    ``MAX_REPEATS`` would (a rate at the threshold itself is never decided)."""
    threshold = _probability("threshold", threshold, low_open=False, high_open=True)
    rate = reproduced / runs if runs else 0.0
    for n in range(max(runs, 1), MAX_REPEATS + 1):
        k = round(rate * n)
        if gate_verdict(k, n, threshold) != "INCONCLUSIVE":
            return n
    return None


def _log_pmf(k: int, n: int, p: float) -> float:
    if p >= 1:
        return 0.0 if k == n else float("-inf")
    return lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p) + (n - k) * log(1 - p)


def failing_probability(n: int, rate: float, threshold: float) -> float:
    """The probability that ``n`` conclusive replays of a candidate reproducing at ``rate``
    end FAILED (the lower interval bound above ``threshold``)."""
    total = 0.0
    for k in range(n + 1):
        if round(wilson_interval(k, n)[0], 4) > threshold:
            total += exp(_log_pmf(k, n, rate))
    return min(total, 1.0)


def repeats_for_power(power: float, rate: float, threshold: float) -> int:
    """The repeats per case for ``--repeat auto``: enough that a regression reproducing at
    ``rate`` ends FAILED with probability at least ``power`` and that a candidate reproducing
    in no replay can pass. ``rate`` must be above ``threshold`` (a rate at or below it is no
    regression to catch); ``InvalidInputError`` naming the field otherwise."""
    power = _probability("power", power, low_open=True, high_open=True)
    rate = _probability("rate", rate, low_open=True, high_open=False)
    threshold = _probability("threshold", threshold, low_open=False, high_open=True)
    if rate <= threshold:
        raise InvalidInputError(
            f"rate {rate} must be above the threshold {threshold}: a candidate reproducing at "
            "most that often passes the gate",
            field="rate",
        )
    can_pass = next(
        (n for n in range(1, MAX_REPEATS + 1) if gate_verdict(0, n, threshold) == "PASSED"),
        None,
    )
    # the binomial sum is not monotone in n (it saws as the failing k steps up): the first n
    # from which on the next few all hold is not needed, the first that holds is what the
    # gate runs
    catches = next(
        (n for n in range(1, MAX_REPEATS + 1) if failing_probability(n, rate, threshold) >= power),
        None,
    )
    if can_pass is None or catches is None:
        raise InvalidInputError(
            f"no repeat count up to {MAX_REPEATS} gives power {power} at rate {rate} with "
            f"threshold {threshold}",
            field="power",
        )
    return max(can_pass, catches)


def counterfactual_threshold(
    replays: Iterable[tuple[str, float | None, tuple[float, float] | None]],
    fix_version: str | None,
) -> float | None:
    """The case's threshold from its incident's counterfactual replays ``(label, rate,
    ci95)``: the upper end of the 95 % interval of the one that tried the confirmed fix
    (``label`` ending ``=<fix_version>``), else of the lowest-rate one; None when no
    counterfactual has a rate (the gate then uses ``DEFAULT_THRESHOLD``). The upper end, not
    the rate: 0 of 10 replays shows a rate below 0.28, not a rate of 0."""
    measured = [
        (label, rate, ci)
        for label, rate, ci in replays
        if label != "exact" and not label.startswith("fork@") and rate is not None and ci
    ]
    if not measured:
        return None
    fixed = [r for r in measured if fix_version and r[0].endswith(f"={fix_version}")]
    _, _, ci = (fixed or sorted(measured, key=lambda r: (r[1], r[2][1])))[0]
    assert ci is not None
    return min(float(ci[1]), 1.0 - 1e-9)
