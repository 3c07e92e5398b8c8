"""The seed's service-level objectives and the pure rules that judge them.

Each objective has a value computed from stored evidence, a goal and a verdict. A ratio with
nothing to measure (no critical run yet, no confirmed incident yet) passes: nothing violates
the objective, and its detail says so rather than printing a made-up 100%.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from models.base import Record
from models.enums import SideEffectStatus


class SloResult(Record):
    name: str
    description: str
    kind: Literal["ratio", "count"]
    #: a percentage (0-100) for a ratio, a count otherwise; None when nothing was measured
    value: float | None
    goal: float
    passed: bool
    numerator: int | None = None
    denominator: int | None = None
    detail: str = ""
    #: ids that break the objective (runs, side effects, incidents), at most a few
    offenders: tuple[str, ...] = ()


class SloReport(Record):
    passed: bool
    objectives: tuple[SloResult, ...]


OFFENDERS_SHOWN = 20


def ratio_objective(
    name: str, description: str, good: int, total: int, offenders: Iterable[str] = ()
) -> SloResult:
    """A "100% of X have Y" objective: ``good`` of ``total``."""
    shown = tuple(sorted(offenders))[:OFFENDERS_SHOWN]
    if total == 0:
        return SloResult(
            name=name,
            description=description,
            kind="ratio",
            value=None,
            goal=100.0,
            passed=True,
            numerator=0,
            denominator=0,
            detail="nothing to measure yet",
        )
    return SloResult(
        name=name,
        description=description,
        kind="ratio",
        value=round(100.0 * good / total, 2),
        goal=100.0,
        passed=good == total,
        numerator=good,
        denominator=total,
        detail=f"{good}/{total}",
        offenders=shown,
    )


def zero_objective(name: str, description: str, offenders: Iterable[str]) -> SloResult:
    """A "0 of X ever" objective: the value is how many offenders there are."""
    found = sorted(set(offenders))
    return SloResult(
        name=name,
        description=description,
        kind="count",
        value=float(len(found)),
        goal=0.0,
        passed=not found,
        detail=f"{len(found)} found",
        offenders=tuple(found[:OFFENDERS_SHOWN]),
    )


def report(objectives: Iterable[SloResult]) -> SloReport:
    results = tuple(objectives)
    return SloReport(passed=all(r.passed for r in results), objectives=results)


def retried_while_unknown(history: Iterable[tuple[SideEffectStatus, bool | None]]) -> bool:
    """Whether a side effect's status history shows an automatic retry of an UNKNOWN outcome.

    ``history`` is each recorded ``(status, reconciled_applied)`` in ledger order. Once an
    effect is UNKNOWN, it may be executed again only after a reconciliation proved it was not
    applied (RECONCILED with ``reconciled_applied`` False): any other way back to EXECUTING is
    the retry rule 5 forbids.
    """
    unknown = proved_not_applied = False
    for status, applied in history:
        if status is SideEffectStatus.UNKNOWN:
            unknown, proved_not_applied = True, False
        elif status is SideEffectStatus.RECONCILED:
            proved_not_applied = applied is False
        elif status is SideEffectStatus.EXECUTING and unknown:
            if not proved_not_applied:
                return True
            unknown = proved_not_applied = False
    return False
