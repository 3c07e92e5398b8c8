"""Input a user can type that once ended in "internal error" (exit 5): a run id longer than any
stored one, a budget of infinite seconds. Each is a one-line refusal, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.cli.test_exit_codes import assert_one_line_refusal

ODD_INPUT = [
    (["runs", "verify", "a" * 300], "run not found"),
    (["runs", "verify", "a" + ":" * 130], "run not found"),
    (["replay", "start", "run-1", "--max-duration", "inf"], "--max-duration"),
    (["replay", "start", "run-1", "--max-duration", "nan"], "--max-duration"),
    (["replay", "start", "run-1", "--max-duration", "1e300"], "--max-duration"),
    (["evidence", "show", "run-1", str(2**64)], "sequence must be from 1"),
]


@pytest.mark.parametrize(
    ("args", "needle"), ODD_INPUT, ids=[" ".join(a)[:40] for a, _ in ODD_INPUT]
)
def test_odd_input_is_a_one_line_refusal_not_an_internal_error(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    env = {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_LOG_FORMAT": "json"}
    # a home that has anchored runs (on a fresh one the path ends before the long name)
    (tmp_path / "artifacts" / "anchors" / "runs").mkdir(parents=True)
    (tmp_path / "artifacts" / "anchors" / "run-anchors").mkdir(parents=True)
    (tmp_path / "anchors" / "run-anchors").mkdir(parents=True)
    assert_one_line_refusal(CliRunner().invoke(app, args, env=env), 2, needle)
