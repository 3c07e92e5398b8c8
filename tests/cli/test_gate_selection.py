"""Which agents the regression gate replays for a candidate, and the refusal of a candidate no
agent has (issue 20: exit 2 naming it, not a regression)."""

from __future__ import annotations

import pytest

from app.regression import gated_graphs
from devstack.demo_incidents import ci_text
from models.errors import InvalidInputError
from worker.catalogs import catalogs


def test_the_gate_replays_the_agents_the_candidate_applies_to() -> None:
    known = catalogs(None)
    assert gated_graphs(known, [("prompt", "v18")]) == ["support-desk"]
    assert gated_graphs(known, [("prompt", "v18")], ["support-desk"]) == ["support-desk"]


@pytest.mark.parametrize(
    ("candidates", "graphs", "needle"),
    [
        ([("prompt", "v99")], [], "prompt=v99"),
        ([("model", "nope")], [], "model 'nope'"),
        ([("prompt", "v18")], ["tool-loop"], "prompt bundle 'v18' is not known for tool-loop"),
        ([("prompt", "v18")], ["nope"], "--graph 'nope'"),
    ],
)
def test_an_unknown_candidate_or_agent_is_bad_input(
    candidates: list[tuple[str, str]], graphs: list[str], needle: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        gated_graphs(catalogs(None), candidates, graphs)
    assert needle in str(refused.value)


def test_intervals_print_as_numbers() -> None:
    assert ci_text((0.0, 0.0712)) == "0.00–0.07" and ci_text(None) == "-"
