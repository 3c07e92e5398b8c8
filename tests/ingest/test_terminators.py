"""Framework terminators in imported traces: every style of ending replays in ``recorded`` mode
with every step the source took (no step dropped after a terminator), the same outcome and no
diff; a terminator is never a side effect. The traces are built here in the span format of the
any-agent exports (``gen_ai.*`` attributes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.local_replay import engine_for, replay_locally
from ingest.otel import import_otel
from ingest.terminators import ending_terminators, is_terminator
from models import ReplayMode, SideEffectRecord
from runtime.trajectory import load_trajectory


def test_the_family_is_recognised_by_shape() -> None:
    for name in (
        "final_answer",
        "final_output",
        "final_result",
        "FinalAnswer",
        "terminate",
        "terminate_tool",
        "Terminate",
        "finish",
        "task_complete",
        "complete_task",
        "done",
        "attempt_completion",
        "end_conversation",
        "return_final_answer",
    ):
        assert is_terminator(name), name
    for name in ("write_file", "get_current_time", "submit_order", "final_exam_grades", "end"):
        assert not is_terminator(name), name


def test_a_terminator_ends_the_loop_only_where_the_run_ended_on_it() -> None:
    model, tool = ("model", ""), ("tool", "final_answer")
    assert ending_terminators([model, ("tool", "x"), model, tool]) == ("final_answer",)
    assert ending_terminators([model, tool, model]) == ()  # a model message follows it
    assert ending_terminators([model, ("tool", "x")]) == ()  # an ordinary tool
    assert ending_terminators([model, tool, model, tool]) == ()  # the run went on after one
    assert ending_terminators([]) == ()


_TRACE = 0x5EED


def _span(n: int, name: str, attributes: dict[str, Any], parent: int | None) -> dict[str, Any]:
    return {
        "name": name,
        "context": {"trace_id": _TRACE, "span_id": n},
        "parent": {"trace_id": _TRACE, "span_id": parent} if parent else None,
        "start_time": 1_758_000_000_000_000_000 + n * 1_000_000,
        "end_time": 1_758_000_000_000_000_000 + n * 1_000_000 + 500_000,
        "status": {"status_code": "ok"},
        "attributes": attributes,
    }


def _trace(steps: list[tuple[str, ...]]) -> dict[str, Any]:
    """A trace: the agent span, then per step a model span (``("model", text)``: an answer;
    ``("model",)``: the tool calls that follow) or a tool span (``("tool", name, args, out)``)."""
    messages = [
        {"role": "system", "content": "Use the tools, then answer."},
        {"role": "user", "content": "Write the current year to a file."},
    ]
    spans = [_span(1, "invoke_agent [agent]", {"gen_ai.operation.name": "invoke_agent"}, None)]
    for n, step in enumerate(steps, start=2):
        if step[0] == "model":
            text = step[1] if len(step) > 1 else None
            attrs = {
                "gen_ai.operation.name": "call_llm",
                "gen_ai.request.model": "m",
                "gen_ai.input.messages": json.dumps(messages),
                "gen_ai.output": text if text is not None else "[]",
                "gen_ai.output.type": "text" if text is not None else "json",
            }
            spans.append(_span(n, "call_llm m", attrs, 1))
        else:
            _, name, args, output = step
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.args": args,
                "gen_ai.output": output,
                "gen_ai.output.type": "json",
            }
            spans.append(_span(n, f"execute_tool {name}", attrs, 1))
    return {"spans": spans}


WORK: list[tuple[str, ...]] = [
    ("model",),
    ("tool", "get_current_time", '{"timezone": "UTC"}', '{"datetime": "2025-09-16"}'),
    ("model",),
    ("tool", "write_file", '{"text": "2025"}', "{}"),
]
STYLES = {
    # the terminator tool, then a last model message (the two unseen frameworks)
    "final_answer-then-message": [
        *WORK,
        ("model",),
        ("tool", "final_answer", '{"answer": "2025"}', "2025"),
        ("model", "I wrote 2025 to the file."),
    ],
    "terminate-then-message": [
        *WORK,
        ("model",),
        ("tool", "terminate", '{"status": "success"}', "The interaction has been completed."),
        ("model", "Done: the file holds 2025."),
    ],
    # the terminator as the last event
    "final_output-last": [
        *WORK,
        ("model",),
        ("tool", "final_output", '{"answer": "2025"}', "2025"),
    ],
    "task_complete-last": [*WORK, ("model",), ("tool", "task_complete", "{}", "ok")],
    # no terminator: a last model message after a tool
    "message-after-tool": [*WORK, ("model", "The file now holds 2025.")],
}


@pytest.mark.parametrize("style", list(STYLES))
async def test_every_ending_style_replays_every_step(stores, tmp_path: Path, style: str) -> None:
    path = tmp_path / f"{style}.json"
    path.write_text(json.dumps(_trace(STYLES[style])), encoding="utf-8")
    (run_id,) = (
        await import_otel(stores.ledger, stores.artifacts, stores.evidence, path, None)
    ).run_ids
    source = await load_trajectory(stores.ledger, run_id)
    n_model = sum(1 for s in STYLES[style] if s[0] == "model")
    assert len(source.model_decisions) == n_model
    # without --write-tools every tool is a write, except the terminators
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    assert [e.capability_id for e in effects] == ["get_current_time", "write_file"]

    local = await replay_locally(engine_for(stores), run_id, ReplayMode.RECORDED)
    assert local.prepared.ok, local.prepared.problems
    c = local.comparison
    assert c is not None and local.stopped is None and local.model_calls == 0
    assert c.same_outcome and c.same_tool_sequence and c.same_side_effects and c.diffs == ()
    assert c.answer_similarity == 1.0
    replayed = await load_trajectory(stores.ledger, local.replay_id)
    assert len(replayed.model_decisions) == n_model  # no step lost after a terminator
    assert [t.capability_id for t in replayed.tool_calls] == [
        t.capability_id for t in source.tool_calls
    ]
