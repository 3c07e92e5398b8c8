"""Where a replay stands in each recorded stream; carried from one step activity to the next."""

from __future__ import annotations

from pydantic import Field

from models.base import Record
from models.budget import BudgetUsage


class ReplayCursors(Record):
    model_calls: int = Field(default=0, ge=0)
    clock_reads: int = Field(default=0, ge=0)
    fixtures: dict[str, int] = Field(default_factory=dict)
    retrievals: dict[str, int] = Field(default_factory=dict)


class ReplayCounters(Record):
    """What a replay did that is reported: never an executed write (that is not possible)."""

    writes_blocked: int = Field(default=0, ge=0)
    fixture_misses: int = Field(default=0, ge=0)
    sandbox_live_calls: int = Field(default=0, ge=0)
    usage: BudgetUsage = BudgetUsage()

    def plus(self, other: ReplayCounters) -> ReplayCounters:
        return ReplayCounters(
            writes_blocked=self.writes_blocked + other.writes_blocked,
            fixture_misses=self.fixture_misses + other.fixture_misses,
            sandbox_live_calls=self.sandbox_live_calls + other.sandbox_live_calls,
            usage=self.usage.plus(other.usage),
        )
