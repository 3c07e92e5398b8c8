"""How often a replay reproduces an incident, with an honest interval for small samples."""

from __future__ import annotations

from math import isfinite, sqrt
from typing import Any

from models.errors import InvalidInputError

__all__ = ["Z_95", "reproduction_summary", "wilson_interval"]

#: the standard normal quantile of 0.975 (two-sided 95 %)
Z_95 = 1.959963984540054


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, not {type(value).__name__}")
    if value < 0:
        raise InvalidInputError(f"{name} must not be negative (got {value})")
    return value


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion ``successes / n``.

    ``(c - h, c + h)`` with ``c = (p + z²/2n) / (1 + z²/n)`` and
    ``h = z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n)``, ``p = successes / n``; clamped to [0, 1]
    and exact at the ends (0 successes → low 0.0, n successes → high 1.0). With ``n = 0``
    nothing is known: ``(0.0, 1.0)``. Refuses (``InvalidInputError``) non-integer or negative
    counts, ``successes > n`` and a ``z`` that is not a finite positive number.
    """
    successes, n = _count("successes", successes), _count("n", n)
    if successes > n:
        raise InvalidInputError(f"successes ({successes}) cannot exceed n ({n})")
    if isinstance(z, bool) or not isinstance(z, int | float) or not isfinite(z) or z <= 0:
        raise InvalidInputError(f"z must be a finite positive number, not {z!r}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denominator = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denominator
    half = z * sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denominator
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return low, high


def reproduction_summary(reproduced: int, runs: int) -> dict[str, Any]:
    """``{"reproduced", "runs", "rate", "ci95"}`` for ``reproduced`` of ``runs`` replays.

    ``rate`` is ``reproduced / runs`` (None when there were no runs); ``ci95`` is the 95 %
    Wilson interval as ``[low, high]`` rounded to 4 places.
    """
    low, high = wilson_interval(reproduced, runs)
    return {
        "reproduced": reproduced,
        "runs": runs,
        "rate": reproduced / runs if runs else None,
        "ci95": [round(low, 4), round(high, 4)],
    }
