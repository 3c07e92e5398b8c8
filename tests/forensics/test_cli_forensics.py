"""``replaybook forensics`` as a user runs it: a real process over the real benchmark files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.testdata import unpacked_testdata

ROOT = Path(__file__).resolve().parents[2]
DATA = unpacked_testdata() / "tau-bench"
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))}
    env |= {"REPLAYBOOK_HOME": str(home), "REPLAYBOOK_LOG_FORMAT": "json"}
    return subprocess.run(
        [REPLAYBOOK, "forensics", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


FILES = [
    "--file",
    f"airline={DATA / 'airline/gpt-4o-airline.json'}",
    "--file",
    f"retail={DATA / 'retail/agentrx-retail-full.json'}",
    "--tools-info",
    str(DATA / "tools_info.json"),
]


def test_evaluate_json(tmp_path: Path) -> None:
    result = run(["evaluate", "--json", *FILES], tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["runs"] == 198
    assert summary["agreement"] >= 0.95
    assert summary["disagreeing_run_ids"] == [d["run_id"] for d in summary["disagreements"]]
    recorded_pass = sum(d["recorded_pass"] for d in summary["by_domain"].values())
    flips = sum(1 if d["predicted_reward"] else -1 for d in summary["disagreements"])
    predicted_fail = summary["runs"] - (recorded_pass + flips)
    assert sum(summary["signatures"].values()) == predicted_fail  # every predicted failure signed


def test_expected_names_the_divergence(tmp_path: Path) -> None:
    # retail task 28: the agent cancelled an order the ground truth keeps
    result = run(["expected", "tau-retail-28-28", "--json", *FILES], tmp_path)
    assert result.returncode == 0, result.stderr
    c = json.loads(result.stdout)
    assert (c["predicted_reward"], c["recorded_reward"]) == (0.0, 0.0)
    assert c["signature"] == "WRITE_UNEXPECTED"
    assert [d["name"] for d in c["extra"]] == ["cancel_pending_order"]
    assert isinstance(c["first_divergent_message_index"], int)
    text = run(["expected", "tau-retail-28-28", *FILES], tmp_path)
    assert "extra     cancel_pending_order" in text.stdout


def test_bad_input_exits_2(tmp_path: Path) -> None:
    assert run(["expected", "tau-retail-nope-0", *FILES], tmp_path).returncode == 2
    result = run(
        ["evaluate", "--file", "nodomain", "--tools-info", str(DATA / "tools_info.json")], tmp_path
    )
    assert result.returncode == 2 and "DOMAIN=PATH" in result.stderr
    assert (
        run(["evaluate", "--file", "retail=/nonexistent.json", *FILES[-2:]], tmp_path).returncode
        == 2
    )


def test_an_empty_store_has_no_imported_runs_and_says_so(tmp_path: Path) -> None:
    result = run(["evaluate", "--json"], tmp_path)
    assert result.returncode == 2 and "no imported tau-bench runs" in result.stderr
