"""The ingestion format's up-front check of a body (``models.ingest``): the fast walk that
builds no paths (``_clean``) passes exactly the values the naming walk (``_json_problem``)
finds nothing in, and a refused event is still named by its path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from models.ingest import MAX_DEPTH, IngestEventBatch, _clean, _json_problem, _text_problem


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


VALUES: list[Any] = [
    None,
    True,
    1.5,
    2**53 - 1,
    2**53,
    -(2**53),
    float("nan"),
    float("inf"),
    "plain",
    "é😀 text",
    "nul \x00 inside",
    "lone \ud800 high",
    "lone \udfff low",
    "\udbff",
    {"a": [1, {"b": "ok"}]},
    {"a": [1, {"b": "bad\x00"}]},
    {"key\x00": 1},
    {"key\ud834": 1},
    ("tuple", 2**60),
    [{"deep": _nested(MAX_DEPTH - 3)}],
    [{"deep": _nested(MAX_DEPTH + 1)}],
    _nested(MAX_DEPTH),
    _nested(MAX_DEPTH + 1),
]


@pytest.mark.parametrize("value", VALUES)
def test_the_fast_walk_passes_what_the_naming_walk_finds_nothing_in(value: Any) -> None:
    assert _clean(value) == (_json_problem(value, "") is None)


def test_a_refused_event_is_named_by_its_path() -> None:
    event = {"type": "user_message", "sequence": 1, "content": "a\x00b"}
    with pytest.raises(ValidationError, match=r"events\[0\]\.content: the NUL character"):
        IngestEventBatch.model_validate({"events": [event]})


@pytest.mark.parametrize(
    "text", [v for v in VALUES if isinstance(v, str)] + ["a\ud800", "\ud7ff\ue000"]
)
def test_text_is_refused_exactly_for_nul_and_surrogates(text: str) -> None:
    # the definition, character by character
    refused = "\x00" in text or any("\ud800" <= c <= "\udfff" for c in text)
    assert (_text_problem(text) is not None) == refused
