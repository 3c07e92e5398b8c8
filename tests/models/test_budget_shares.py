"""One budget per request (issue 16): allotments never add up to more than what is left, and
a model call whose worst case does not fit is refused before it is made."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from models.budget import BudgetUsage, fitting, peak, remaining, shares, spent
from models.errors import BudgetExhaustedError
from models.model_call import ChatMessage, ModelRequest, ModelResponse, TokenUsage
from models.replay import ReplayBudget
from runtime.replay.gateways import LiveModelProvider, StepLedger


def test_shares_never_exceed_what_is_left() -> None:
    left = remaining(
        ReplayBudget(
            max_model_calls=10,
            max_tokens=1000,
            max_cost=Decimal("1"),
            max_duration=timedelta(seconds=60),
        ),
        BudgetUsage(model_calls=3, tokens=100, cost=Decimal("0.4"), duration_seconds=15),
    )
    assert left.max_model_calls == 7 and left.max_tokens == 900 and left.max_cost == Decimal("0.6")
    assert left.max_duration == timedelta(seconds=45)
    parts = shares(left, 3)
    assert [p.max_model_calls for p in parts] == [3, 2, 2]
    assert sum(p.max_tokens or 0 for p in parts) == 900
    assert sum(p.max_cost or 0 for p in parts) <= Decimal("0.6")
    assert all(p.max_duration == timedelta(seconds=45) for p in parts)
    assert not spent(left) and spent(
        remaining(ReplayBudget(max_model_calls=2), BudgetUsage(model_calls=5))
    )


def test_how_many_children_fit() -> None:
    need = peak([BudgetUsage(model_calls=2, tokens=600), BudgetUsage(model_calls=1, tokens=300)])
    assert need.model_calls == 2 and need.tokens == 600
    assert fitting(ReplayBudget(max_model_calls=7), need) == 3
    assert fitting(ReplayBudget(max_model_calls=7, max_tokens=1000), need) == 1
    assert fitting(ReplayBudget(), need) is None  # nothing limits
    assert fitting(ReplayBudget(max_model_calls=1), BudgetUsage()) is None  # needs no calls


class CountingModel:
    profile = "test:counting"
    price_per_1k_tokens = Decimal("0.002")

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return ModelResponse(
            model="m", content="ok", usage=TokenUsage(prompt_tokens=5, completion_tokens=3)
        )


def request(words: int) -> ModelRequest:
    return ModelRequest(model="m", messages=(ChatMessage(role="user", content="word " * words),))


async def test_a_call_that_does_not_fit_is_refused_before_it_is_made() -> None:
    model = CountingModel()
    live = LiveModelProvider(model, StepLedger(), ReplayBudget(max_tokens=10), BudgetUsage(), 1)
    with pytest.raises(BudgetExhaustedError, match="does not fit"):
        await live.complete(request(400))  # about 500 prompt tokens against 10
    assert model.requests == []


async def test_max_tokens_is_capped_to_what_is_left() -> None:
    model = CountingModel()
    budget = ReplayBudget(max_tokens=100, max_model_calls=1)
    live = LiveModelProvider(model, StepLedger(), budget, BudgetUsage(tokens=40), 1)
    await live.complete(request(8))  # 10 prompt tokens: 100 - 40 - 10 = 50 left to answer
    assert model.requests[0].max_tokens == 50
    with pytest.raises(BudgetExhaustedError, match="max_model_calls 1"):
        await live.complete(request(8))
    assert len(model.requests) == 1


async def test_the_cost_budget_caps_by_the_models_price() -> None:
    model = CountingModel()
    # 0.0002 EUR at 0.002 EUR/1k tokens = 100 tokens in all, 10 of them the prompt
    live = LiveModelProvider(
        model, StepLedger(), ReplayBudget(max_cost=Decimal("0.0002")), BudgetUsage(), 1
    )
    await live.complete(request(8))
    assert model.requests[0].max_tokens == 90
