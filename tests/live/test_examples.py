"""Each framework example of ``examples/live/`` recorded once against the real local model
server (through the native tool-calls front), the real packages of each framework: the run is
recorded, verifies intact, and a recorded replay reproduces it with zero model calls and zero
writes executed. Two model calls at most per run (``--max-turns 2``), to stay short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.live.conftest import LiveStack

EXAMPLES = ("openai_refund", "openai_agents_refund", "langgraph_refund", "pydantic_ai_refund")


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_example_is_recorded_and_replays_recorded(
    live_stack: LiveStack, name: str, tmp_path: Path
) -> None:
    code, result = live_stack.run_example(name, tmp_path / "spool", "--max-turns", "2")
    # a FAILED agent (exit 1) is still a recorded run; a recording that did not arrive is not
    assert code in (0, 1), result
    assert result["recorded"] is True, result
    run_id = result["run_id"]
    assert result["ended"] in ("answer", "turn_cap") or result["status"] == "FAILED", result

    verify = live_stack.cli("runs", "verify", run_id)
    assert verify.returncode == 0 and verify.stdout.startswith("intact"), verify.stdout

    shown = live_stack.cli("runs", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    if name == "pydantic_ai_refund":
        # through OTLP the span's model is kept as a label; the receiver pins no model
        # profile yet (docs/live-capture.md, "What does not work yet")
        assert run["labels"]["model"] == "smollm2-135m", run["labels"]
    else:
        assert run["pinned"]["model_profile"] == "smollm2-135m", run["pinned"]

    replay = live_stack.cli("replay", "start", run_id, "--mode", "recorded", "--wait", "--json")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    outcome = json.loads(replay.stdout)
    assert outcome["verdict"] == "REPRODUCED", outcome
    assert outcome["budget_used"]["model_calls"] == 0
    assert outcome["writes_executed"] == 0
