"""``runs list`` kinds: what each run is, from the labels its recorder gave it."""

from __future__ import annotations

from app.runs import DEFAULT_RUN_KINDS, run_kind
from models.ingest import TOOL_LOOP_GRAPH_ID


def test_each_kind_of_run() -> None:
    assert run_kind("run-1", "support-desk", {"subject": "customer:C-1"}) == "source"
    assert run_kind("replay-1", "support-desk", {"kind": "replay"}) == "replay"
    assert run_kind("replay-1-003", "support-desk", {"kind": "replay"}) == "replay"
    assert run_kind("regress-1-000", "support-desk", {"kind": "replay"}) == "regress"
    assert run_kind("run-t", TOOL_LOOP_GRAPH_ID, {"source": "tau-bench"}) == "imported"
    assert run_kind("run-o", "my-agent", {"source": "otel"}) == "imported"
    assert DEFAULT_RUN_KINDS == ("source", "imported")
