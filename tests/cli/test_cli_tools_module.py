"""``--tools-module`` on the command line (issue 32, item 3): a module that cannot serve is
refused before anything starts, in one line naming the flag, exit 2 — on ``replay start``,
``incident open`` and ``regress`` alike. In process (Typer's runner: the same app, options and
error handling as the console script, without an interpreter start per case)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app


def run(args: list[str], home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("REPLAYBOOK_HOME", str(home))
    monkeypatch.setenv("REPLAYBOOK_LOCAL_MODELS", "off")
    done = CliRunner().invoke(app, args)
    return done.exit_code, done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["replay", "start", "run-x", "--on-fixture-miss", "sandbox-live"],
            "--tools-module no_such_team_tools: cannot import no_such_team_tools",
        ),
        (["incident", "open", "run-x"], "cannot import no_such_team_tools"),
        (["regress", "--candidate", "prompt=v18"], "cannot import no_such_team_tools"),
    ],
)
def test_an_unimportable_module_is_refused_with_exit_2(
    args: list[str], says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, stderr = run([*args, "--tools-module", "no_such_team_tools"], tmp_path, monkeypatch)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], stderr


def test_the_module_answers_only_under_sandbox_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["replay", "start", "run-x", "--tools-module", "examples.live.desk_replay_tools"]
    code, stderr = run(args, tmp_path, monkeypatch)
    assert code == 2, stderr
    assert stderr.strip() == (
        "replaybook: --tools-module examples.live.desk_replay_tools: the team's tools answer "
        "fixture misses only under --on-fixture-miss sandbox-live (here FAIL)"
    )
