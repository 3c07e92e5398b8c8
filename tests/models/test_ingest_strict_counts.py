"""A model call's counts in the ingestion format are strict (docs/importing.md: ``true`` for a
count is 422 naming the field): a coerced token count or latency would be recorded as evidence
the client never sent."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from models.ingest import IngestEventBatch, ModelCallEvent


def _model_call(**fields: Any) -> dict[str, Any]:
    return {"events": [{"sequence": 1, "type": "model_call", "model": "m", **fields}]}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"usage": {"prompt_tokens": True}}, "usage.prompt_tokens"),
        ({"usage": {"completion_tokens": "12"}}, "usage.completion_tokens"),
        ({"usage": {"prompt_tokens": 12.0}}, "usage.prompt_tokens"),
        ({"latency_ms": True}, "latency_ms"),
        ({"latency_ms": "3"}, "latency_ms"),
    ],
)
def test_coerced_counts_are_refused_naming_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as refused:
        IngestEventBatch.model_validate(_model_call(**fields))
    located = [".".join(str(p) for p in error["loc"]) for error in refused.value.errors()]
    assert any(loc.endswith(field) for loc in located), located


def test_counts_as_numbers_are_kept_and_digest_unchanged() -> None:
    batch = IngestEventBatch.model_validate(
        _model_call(usage={"prompt_tokens": 120, "completion_tokens": 20}, latency_ms=35)
    )
    event = batch.events[0]
    assert isinstance(event, ModelCallEvent)
    assert (event.usage.prompt_tokens, event.usage.total_tokens, event.latency_ms) == (
        120,
        140,
        35.0,
    )
    # the digest sees the same body as before the counts were strict
    assert event.digest_body()["usage"] == {"prompt_tokens": 120, "completion_tokens": 20}
