"""``--tools-module`` on the command line (issue 32, item 3): a module that cannot serve is
refused before anything starts, in one line naming the flag, exit 2 — on ``replay start``,
``incident open`` and ``regress`` alike. A real process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from cli.main import app; sys.argv[0] = 'replaybook'; app()"


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))}
    env |= {"REPLAYBOOK_HOME": str(home), "REPLAYBOOK_LOCAL_MODELS": "off"}
    return subprocess.run(
        [sys.executable, "-c", CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


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
    args: list[str], says: str, tmp_path: Path
) -> None:
    done = run([*args, "--tools-module", "no_such_team_tools"], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_the_module_answers_only_under_sandbox_live(tmp_path: Path) -> None:
    done = run(
        ["replay", "start", "run-x", "--tools-module", "examples.live.desk_replay_tools"], tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "replaybook: --tools-module examples.live.desk_replay_tools: the team's tools answer "
        "fixture misses only under --on-fixture-miss sandbox-live (here FAIL)"
    )
