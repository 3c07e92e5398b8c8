"""The OpenTelemetry importer on the real any-agent traces (Agno, LangChain, OpenAI Agents SDK,
smolagents): every file imports, verifies, and replays in ``recorded`` mode with its tool
sequence and exactly one side effect (``write_file``); pseudo-tools are no side effect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.local_replay import engine_for, replay_locally
from ingest.otel import import_otel
from models import ReplayMode, SideEffectRecord
from models.errors import InvalidInputError
from runtime.trajectory import load_trajectory
from tests.fixtures_import import OTEL_FILES


def test_the_four_framework_traces_are_there() -> None:
    assert {p.name.split("_")[0] for p in OTEL_FILES} >= {
        "AGNO",
        "LANGCHAIN",
        "OPENAI",
        "SMOLAGENTS",
    }


@pytest.mark.parametrize("path", OTEL_FILES, ids=lambda p: p.name.split("_")[0])
async def test_trace_imports_and_replays_its_tool_sequence(stores, path: Path) -> None:
    report = await import_otel(
        stores.ledger, stores.artifacts, stores.evidence, path, ["write_file"]
    )
    (run_id,) = report.run_ids
    assert report.imported == 1 and report.opaque == []
    assert (await stores.ledger.verify(run_id)).intact
    source = await load_trajectory(stores.ledger, run_id)
    tools = [
        t.capability_id
        for t in source.tool_calls
        if t.capability_id not in ("final_answer", "final_output")
    ]
    assert tools == ["get_current_time", "write_file"]
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    assert [e.capability_id for e in effects] == ["write_file"]

    local = await replay_locally(engine_for(stores), run_id, ReplayMode.RECORDED)
    assert local.prepared.ok, local.prepared.problems
    c = local.comparison
    assert c is not None and local.stopped is None
    assert c.same_tool_sequence and c.same_side_effects and c.same_outcome and c.diffs == ()
    assert local.reproduced and local.writes_blocked == 1 and local.model_calls == 0

    again = await import_otel(
        stores.ledger, stores.artifacts, stores.evidence, path, ["write_file"]
    )
    assert again.run_ids == [run_id] and again.imported == 0 and again.events_recorded == 0


async def test_without_write_tools_unknown_tools_are_writes_but_pseudo_tools_never(stores) -> None:
    smol = next(p for p in OTEL_FILES if p.name.startswith("SMOLAGENTS"))
    (run_id,) = (await import_otel(stores.ledger, stores.artifacts, stores.evidence, smol)).run_ids
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    assert sorted(e.capability_id for e in effects) == ["get_current_time", "write_file"]


async def test_an_uninterpretable_span_is_kept_and_reported(stores, tmp_path: Path) -> None:
    data = json.loads(OTEL_FILES[0].read_text())
    odd = dict(
        data["spans"][0],
        name="retrieve documents",
        attributes={"gen_ai.operation.name": "retrieve"},
    )
    odd["context"] = dict(odd["context"], span_id=42)
    data["spans"].append(odd)
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    report = await import_otel(
        stores.ledger, stores.artifacts, stores.evidence, path, ["write_file"]
    )
    assert len(report.opaque) == 1 and "retrieve documents" in report.opaque[0]
    events = await stores.ledger.events(report.run_ids[0])
    assert [e.type.value for e in events].count("OPAQUE") == 1
    # importing the same file again records nothing (the OPAQUE event is recognised too)
    again = await import_otel(
        stores.ledger, stores.artifacts, stores.evidence, path, ["write_file"]
    )
    assert (again.imported, again.already_imported, again.events_recorded) == (0, 1, 0)
    assert len(await stores.ledger.events(report.run_ids[0])) == len(events)


def test_malformed_traces_name_the_position(tmp_path: Path) -> None:
    from ingest.otel import convert_otel_file

    bad = tmp_path / "bad.json"
    bad.write_text('{"spans": [{"name": "call_llm x", "context": {"span_id": 1}}]}')
    with pytest.raises(InvalidInputError, match=r"spans\[0\]: missing or invalid 'start_time'"):
        convert_otel_file(bad)
    bad.write_text('{"spans": [\n  {"name": }]}')
    with pytest.raises(InvalidInputError, match="invalid JSON at line 2 column"):
        convert_otel_file(bad)


def test_bad_numbers_and_deep_nesting_are_refused_cleanly(tmp_path: Path) -> None:
    from ingest.otel import convert_otel_file

    bad = tmp_path / "bad.json"
    for text, problem in [
        ('{"spans": [' * 5000 + "]}" * 5000, "nested too deeply"),
        ('{"spans": [], "x": NaN}', "NaN is not a JSON number"),
        ('{"spans": [], "spans": []}', "duplicate key 'spans'"),
    ]:
        bad.write_text(text)
        with pytest.raises(InvalidInputError, match=problem):
            convert_otel_file(bad)
    data = json.loads(OTEL_FILES[0].read_text())
    llm = next(
        s for s in data["spans"] if "gen_ai.usage.input_tokens" in json.dumps(s["attributes"])
    )
    attributes = llm["attributes"]
    if isinstance(attributes, dict):
        attributes["gen_ai.usage.input_tokens"] = "NaN"
    else:
        for a in attributes:
            if a.get("key") == "gen_ai.usage.input_tokens":
                a["value"] = {"stringValue": "NaN"}
    bad.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match=r"gen_ai\.usage\.input_tokens"):
        convert_otel_file(bad)
