"""The OpenInference importer on a trace written here from the published conventions
(``openinference.span.kind`` LLM/TOOL/CHAIN/AGENT, flattened ``llm.input_messages.*`` and
``llm.output_messages.*.message.tool_calls.*.tool_call.*``, ``tool.name``, ``input.value``,
``output.value``, ``llm.token_count.*``): it imports, verifies and replays in ``recorded`` mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.local_replay import engine_for, replay_locally
from ingest.openinference import import_openinference
from models import ReplayMode, SideEffectRecord
from models.errors import InvalidInputError
from runtime.trajectory import load_trajectory

TRACE = 0xABC


def _span(n: int, name: str, parent: int | None, attributes: dict[str, Any]) -> dict[str, Any]:
    start = 1_760_000_000_000_000_000 + n * 1_000_000
    return {
        "name": name,
        "context": {"trace_id": TRACE, "span_id": n},
        "parent": {"trace_id": TRACE, "span_id": parent} if parent else None,
        "start_time": start,
        "end_time": start + 500_000,
        "attributes": attributes,
    }


def _inputs(*messages: tuple[str, str]) -> dict[str, Any]:
    out = {}
    for i, (role, content) in enumerate(messages):
        out[f"llm.input_messages.{i}.message.role"] = role
        out[f"llm.input_messages.{i}.message.content"] = content
    return out


def _llm(n: int, call: tuple[str, str, str] | None, text: str | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o-mini",
        "llm.token_count.prompt": 50,
        "llm.token_count.completion": 10,
        **_inputs(("system", "You book tables."), ("user", "Book a table for two in Paris.")),
        "llm.output_messages.0.message.role": "assistant",
    }
    if call:
        prefix = "llm.output_messages.0.message.tool_calls.0.tool_call"
        attrs |= {
            f"{prefix}.id": call[0],
            f"{prefix}.function.name": call[1],
            f"{prefix}.function.arguments": call[2],
        }
    if text:
        attrs["llm.output_messages.0.message.content"] = text
    return _span(n, "ChatCompletion", 2, attrs)


def _tool(n: int, name: str, args: str, output: str) -> dict[str, Any]:
    attrs = {
        "openinference.span.kind": "TOOL",
        "tool.name": name,
        "input.value": args,
        "output.value": output,
    }
    return _span(n, name, 2, attrs)


def _trace() -> dict[str, Any]:
    return {
        "spans": [
            _span(1, "agent", None, {"openinference.span.kind": "AGENT", "input.value": "Book"}),
            _span(2, "AgentExecutor", 1, {"openinference.span.kind": "CHAIN"}),
            _llm(3, ("call_1", "find_restaurant", '{"city": "Paris"}')),
            _tool(4, "find_restaurant", '{"city": "Paris"}', '{"restaurant_id": "r-9"}'),
            _span(5, "retrieve", 2, {"openinference.span.kind": "RETRIEVER"}),
            _llm(6, ("call_2", "book_table", '{"restaurant_id": "r-9", "people": 2}')),
            _tool(7, "book_table", '{"restaurant_id": "r-9", "people": 2}', '{"booking": "b-1"}'),
            _llm(8, None, "Booked: table for two at r-9 (booking b-1)."),
        ]
    }


async def test_an_openinference_trace_imports_and_replays(stores, tmp_path: Path) -> None:
    path = tmp_path / "phoenix.json"
    path.write_text(json.dumps(_trace()), encoding="utf-8")
    report = await import_openinference(
        stores.ledger, stores.artifacts, stores.evidence, path, ["book_table"]
    )
    (run_id,) = report.run_ids
    # the inner CHAIN is grouping only; the RETRIEVER is kept and reported
    assert len(report.opaque) == 1 and "retrieve" in report.opaque[0]
    assert (await stores.ledger.verify(run_id)).intact
    source = await load_trajectory(stores.ledger, run_id)
    assert [t.capability_id for t in source.tool_calls] == ["find_restaurant", "book_table"]
    assert len(source.model_decisions) == 3
    assert source.final_answer == "Booked: table for two at r-9 (booking b-1)."
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    assert [(e.capability_id, e.status.value) for e in effects] == [("book_table", "CONFIRMED")]

    local = await replay_locally(engine_for(stores), run_id, ReplayMode.RECORDED)
    c = local.comparison
    assert c is not None and local.stopped is None and local.model_calls == 0
    assert c.same_outcome and c.same_tool_sequence and c.diffs == ()
    assert local.writes_blocked == 1


def test_a_file_without_openinference_spans_is_refused(tmp_path: Path) -> None:
    from ingest.openinference import convert_openinference_file

    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"spans": [_span(1, "x", None, {})]}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not OpenInference"):
        convert_openinference_file(path)
