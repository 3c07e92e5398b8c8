"""``incident confirm`` refuses a bad ``--failure-type`` or ``--expect`` as bad input (exit 2,
one line naming the problem) before it connects to anything."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import run

BASE = ["incident", "confirm", "INC-x", "--root-cause", "c", "--fix-version", "v18"]


def test_bad_failure_type_and_expectation_are_bad_input(tmp_path: Path) -> None:
    bad_type = run([*BASE, "--verified-by", "dana", "--failure-type", "VIBES"], tmp_path)
    assert bad_type.returncode == 2, bad_type.stderr
    assert b"--failure-type 'VIBES': expected one of MODEL_DECISION, PROMPT" in bad_type.stderr
    bad_expect = run(
        [*BASE, "--verified-by", "dana", "--expect", "tool email.send called after x"], tmp_path
    )
    assert bad_expect.returncode == 2, bad_expect.stderr
    assert b"expected the end at 'after x'" in bad_expect.stderr
    assert b"Traceback" not in bad_expect.stderr + bad_type.stderr
