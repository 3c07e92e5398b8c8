"""``json_text_checked``: a body whose text passes it skips the models' walk of every value
(``_NoNul``), so it must be False for every body ``parse_json`` accepts and ``_NoNul``
refuses: NUL, an unsafe integer that is the canonical text of a double, too deep nesting."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from models.canonical import parse_json
from models.ingest import CHECKED_JSON, MAX_DEPTH, IngestEventBatch, json_text_checked


def _batch(content: object) -> bytes:
    event = {
        "type": "user_message",
        "content": content,
        "sequence": 1,
        "at": "2026-01-01T00:00:00Z",
    }
    return json.dumps({"events": [event]}).encode()


def _nested(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "raw",
    [
        _batch("a\x00b"),  # the escape \u0000
        _batch("ok").replace(b'"sequence": 1', b'"sequence": 10000000000000000'),
        json.dumps({"events": [], "x": _nested(MAX_DEPTH + 2)}).encode(),
    ],
    ids=["nul", "unsafe-integer", "deep"],
)
def test_what_the_walk_refuses_is_never_taken_as_checked(raw: bytes) -> None:
    parse_json(raw)  # accepted by the text's own check: the walk must still run
    assert not json_text_checked(raw)
    with pytest.raises(ValidationError):
        IngestEventBatch.model_validate_json(raw)


def test_a_plain_chat_batch_is_checked_and_validates_the_same() -> None:
    raw = _batch('Grüße, 日本 🙏 "quoted"\nnew line +49 151 2345 6789')
    assert json_text_checked(raw)
    walked = IngestEventBatch.model_validate_json(raw)
    assert IngestEventBatch.model_validate_json(raw, context={CHECKED_JSON: True}) == walked
