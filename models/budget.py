"""Budget arithmetic for replays (rule 15): what was used, and whether a limit is reached."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

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
