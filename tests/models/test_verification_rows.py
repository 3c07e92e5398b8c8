"""``rows_as_expected`` (the lookup rows of a table compared column by column, at once) vouches
for stored rows only when ``compare_row`` finds nothing in any of them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from models.verification import ProjectionRule, compare_row, expected_rows, rows_as_expected

RULE = ProjectionRule(
    table="side_effects",
    label="side effect",
    event_types=frozenset({"side_effect"}),
    key_column="side_effect_id",
    natural_key="side_effect_id",
    signature=frozenset({"side_effect_id", "status"}),
    columns=("status", "capability_id"),
    mutable=True,
)
CHECKPOINTS = ProjectionRule(
    table="checkpoints",
    label="checkpoint",
    event_types=frozenset({"checkpoint"}),
    key_column="checkpoint_id",
    natural_key=None,
    signature=frozenset({"sequence"}),
    columns=("sequence",),
)


def _events() -> list[tuple[int, str, str, str, Any]]:
    def record(key: str, status: str) -> dict[str, Any]:
        return {"side_effect_id": key, "status": status, "capability_id": "pay", "n": [1, {"a": 2}]}

    return [
        (1, "e1", "side_effect", "sha256:1", record("se-1", "EXECUTING")),
        (2, "e2", "side_effect", "sha256:2", record("se-2", "EXECUTING")),
        (3, "e3", "side_effect", "sha256:3", record("se-1", "CONFIRMED")),  # updates se-1
        (4, "e4", "other", "sha256:4", record("se-3", "EXECUTING")),  # not of the rule's types
    ]


def _stored(rule: ProjectionRule, expected: dict[str, Any]) -> list[list[Any]]:
    """The stored columns (``rule.compared``) of rows exactly as expected, as a store reads them
    (separately parsed: equal, not the same objects)."""
    rows = [
        [copy.deepcopy(w.record).get(c) for c in rule.columns]
        + ([] if "sequence" in rule.columns else [w.sequence])
        + [w.content_hash, copy.deepcopy(w.record)]
        for w in expected.values()
    ]
    return [list(column) for column in zip(*rows, strict=True)]


def test_rows_as_recorded_are_as_expected() -> None:
    expected = expected_rows(RULE, _events())
    assert [(w.key, w.sequence) for w in expected.values()] == [("se-1", 3), ("se-2", 2)]
    stored = _stored(RULE, expected)
    assert RULE.compared == ("status", "capability_id", "sequence", "content_hash", "record")
    assert rows_as_expected(RULE, list(expected.values()), stored)
    for place, want in enumerate(expected.values()):
        actual = dict(zip(RULE.compared, (column[place] for column in stored), strict=True))
        assert compare_row(RULE, want, actual, lambda a, b: False) is None


@pytest.mark.parametrize("column", range(5))
@pytest.mark.parametrize("place", [0, 1])
def test_any_value_that_differs_is_not_as_expected(column: int, place: int) -> None:
    expected = expected_rows(RULE, _events())
    stored = _stored(RULE, expected)
    changed = stored[column][place]
    if isinstance(changed, dict):
        changed = {**changed, "n": [1, {"a": 3}]}  # deep inside the record
    elif isinstance(changed, int):
        changed += 1
    else:
        changed += "x"
    stored[column][place] = changed
    assert not rows_as_expected(RULE, list(expected.values()), stored)
    want = list(expected.values())[place]
    actual = dict(zip(RULE.compared, (c[place] for c in stored), strict=True))
    assert compare_row(RULE, want, actual, lambda a, b: False) is not None


def test_a_row_too_many_or_too_few_is_not_as_expected() -> None:
    expected = expected_rows(RULE, _events())
    stored = _stored(RULE, expected)
    assert not rows_as_expected(RULE, list(expected.values()), [c[:1] for c in stored])
    assert not rows_as_expected(RULE, list(expected.values()), stored[:-1])


def test_a_checkpoint_row_keeps_its_own_sequence() -> None:
    events = [(9, "e9", "checkpoint", "sha256:9", {"sequence": 7})]
    expected = expected_rows(CHECKPOINTS, events)
    assert CHECKPOINTS.compared == ("sequence", "content_hash", "record")
    stored: list[list[Any]] = [[7], ["sha256:9"], [{"sequence": 7}]]
    assert rows_as_expected(CHECKPOINTS, list(expected.values()), stored)
    stored[0] = [9]  # the event's sequence is not the checkpoint's
    assert not rows_as_expected(CHECKPOINTS, list(expected.values()), stored)
