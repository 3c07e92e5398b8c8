"""Fixtures are consumed, not reused (issue 16): the (k+1)-th identical request when k were
recorded is a fixture miss, handled by the miss policy — never the last answer again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from models import FixtureMissPolicy
from runtime.replay.gateways import ReplayToolGateway, StepLedger


def gateway(fixtures: dict[str, list[Any]], positions: StepLedger) -> ReplayToolGateway:
    # only the fixture bookkeeping is exercised here: the registry, recorder and policy are
    # never reached
    return ReplayToolGateway(
        SimpleNamespace(get=lambda _: None),  # type: ignore[arg-type]
        {},
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        "",
        SimpleNamespace(fixture=lambda key, used: _recorded(fixtures, key, used)),
        positions,
        FixtureMissPolicy.FAIL,
    )


def _recorded(fixtures: dict[str, list[Any]], key: str, used: int) -> Any:
    """The source's answer to the ``used``-th repeat of ``key`` (``SourceEvidence.fixture``)."""
    recorded = fixtures.get(key, [])
    return recorded[used] if used < len(recorded) else None


def test_each_recorded_answer_is_used_once_then_the_request_misses() -> None:
    positions = StepLedger()
    tools = gateway({"sha256:a": ["first", "second"]}, positions)
    assert tools._next_fixture("sha256:a") == "first"
    assert tools._next_fixture("sha256:a") == "second"
    assert tools._next_fixture("sha256:a") is None  # the third: a miss, not "second" again
    assert tools._next_fixture("sha256:never") is None
    assert positions.fixtures == {"sha256:a": 2}


def test_consumption_carries_across_steps() -> None:
    # a later step starts from what the replay's earlier steps consumed
    tools = gateway({"sha256:a": ["only"]}, StepLedger(fixtures={"sha256:a": 1}))
    assert tools._next_fixture("sha256:a") is None
