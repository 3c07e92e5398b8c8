"""Budget arithmetic for replays (rule 15): what was used, and whether a limit is reached."""

from __future__ import annotations

from datetime import timedelta
from decimal import ROUND_DOWN, Decimal

from pydantic import Field

from models.base import Record
from models.replay import ReplayBudget


class BudgetUsage(Record):
    model_calls: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)
    cost: Decimal = Decimal(0)
    duration_seconds: float = Field(default=0.0, ge=0)

    def plus(self, other: BudgetUsage) -> BudgetUsage:
        return BudgetUsage(
            model_calls=self.model_calls + other.model_calls,
            tokens=self.tokens + other.tokens,
            cost=self.cost + other.cost,
            duration_seconds=self.duration_seconds + other.duration_seconds,
        )


def exhausted(budget: ReplayBudget, used: BudgetUsage) -> str | None:
    """The reason the budget is spent, or None while there is room left."""
    if budget.max_model_calls is not None and used.model_calls >= budget.max_model_calls:
        return f"max_model_calls {budget.max_model_calls} reached ({used.model_calls} calls)"
    if budget.max_tokens is not None and used.tokens >= budget.max_tokens:
        return f"max_tokens {budget.max_tokens} reached ({used.tokens} tokens)"
    if budget.max_cost is not None and used.cost >= budget.max_cost:
        return f"max_cost {budget.max_cost} reached ({used.cost})"
    if (
        budget.max_duration is not None
        and timedelta(seconds=used.duration_seconds) >= budget.max_duration
    ):
        return f"max_duration {budget.max_duration.total_seconds():g}s reached"
    return None


def _less(limit: int | None, used: int) -> int | None:
    return None if limit is None else max(limit - used, 0)


def remaining(budget: ReplayBudget, used: BudgetUsage) -> ReplayBudget:
    """What is left of ``budget`` after ``used`` (None stays no limit; never below zero)."""
    duration = None
    if budget.max_duration is not None:
        left = budget.max_duration.total_seconds() - used.duration_seconds
        duration = timedelta(seconds=max(left, 0.0))
    return ReplayBudget(
        max_model_calls=_less(budget.max_model_calls, used.model_calls),
        max_tokens=_less(budget.max_tokens, used.tokens),
        max_cost=None if budget.max_cost is None else max(budget.max_cost - used.cost, Decimal(0)),
        max_duration=duration,
    )


def limited(budget: ReplayBudget) -> bool:
    """Whether the budget limits spend (calls, tokens or cost), not only time."""
    return any(v is not None for v in (budget.max_model_calls, budget.max_tokens, budget.max_cost))


def spent(budget: ReplayBudget) -> bool:
    """Whether nothing is left in some dimension: a child started with it could not run."""
    if budget.max_duration is not None and budget.max_duration.total_seconds() <= 0:
        return True
    return budget.max_model_calls == 0 or budget.max_tokens == 0 or budget.max_cost == 0


def fitting(left: ReplayBudget, need: BudgetUsage) -> int | None:
    """How many children that each use ``need`` fit in ``left`` (None: no limit applies)."""
    counts: list[int] = []
    if left.max_model_calls is not None and need.model_calls:
        counts.append(left.max_model_calls // need.model_calls)
    if left.max_tokens is not None and need.tokens:
        counts.append(left.max_tokens // need.tokens)
    if left.max_cost is not None and need.cost:
        counts.append(int(left.max_cost // need.cost))
    return min(counts) if counts else None


def shares(left: ReplayBudget, n: int) -> list[ReplayBudget]:
    """``left`` split into ``n`` allotments whose sum never exceeds it: calls and tokens
    divided with the remainder to the first ones, cost divided, and the same time window for
    all (the children run at once)."""

    def split(total: int | None, i: int) -> int | None:
        if total is None:
            return None
        return total // n + (1 if i < total % n else 0)

    cost = None
    if left.max_cost is not None:
        cost = (left.max_cost / n).quantize(Decimal("0.000001"), rounding=ROUND_DOWN)
    return [
        ReplayBudget(
            max_model_calls=split(left.max_model_calls, i),
            max_tokens=split(left.max_tokens, i),
            max_cost=cost,
            max_duration=left.max_duration,
        )
        for i in range(n)
    ]


def peak(usages: list[BudgetUsage]) -> BudgetUsage:
    """The most any one of ``usages`` used in each dimension (what one more child may need)."""
    return BudgetUsage(
        model_calls=max((u.model_calls for u in usages), default=0),
        tokens=max((u.tokens for u in usages), default=0),
        cost=max((u.cost for u in usages), default=Decimal(0)),
    )
