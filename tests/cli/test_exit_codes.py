"""The exit-code table (``cli/exit_codes.py``, docs/reference/cli.md) and bad input as a user types it: every
command is in the table, every refusal is one line naming the field and the rule, never a
traceback, pydantic's text or a Python exception name."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from cli.exit_codes import COMMAND_EXIT_CODES
from cli.main import app
from devstack.ports import free_ports
from tests.cli.test_cli import ROOT, run
from tests.testdata import unpacked_testdata


def _commands(group: Any, prefix: str = "") -> set[str]:
    """Every command path of a (typer's own) click group."""
    names = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            if command.callback is not None and command.invoke_without_command:
                names.add(path)
            names |= _commands(command, f"{path} ")
        else:
            names.add(path)
    return names


def test_every_command_is_in_the_exit_code_table() -> None:
    assert _commands(typer.main.get_group(app)) == set(COMMAND_EXIT_CODES)


def test_the_cli_reference_shows_the_table() -> None:
    readme = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for code in range(7):
        assert f"| `{code}` |" in readme
    (inconclusive,) = [line for line in readme.splitlines() if line.startswith("| `6` |")]
    for command, codes in COMMAND_EXIT_CODES.items():
        if 1 in codes or 3 in codes:
            row = f"| `{command}` | {codes.get(1, '')} | {codes.get(3, '')} |"
            assert row in readme, row
        if 6 in codes:  # the commands that can end inconclusive are named in the code's row
            assert f"`{command}`" in inconclusive, command


def assert_one_line_refusal(result: Any, code: int, *needles: str) -> str:
    """``result``: a finished process, or typer's ``CliRunner`` result."""
    stderr = result.stderr if isinstance(result.stderr, str) else result.stderr.decode()
    returned = getattr(result, "returncode", getattr(result, "exit_code", None))
    assert returned == code, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("replaybook: ")
    for forbidden in ("Traceback", "pydantic", "validation error", "ValueError", "TypeError"):
        assert forbidden not in stderr, stderr
    for needle in needles:
        assert needle in stderr, stderr
    return lines[0]


BAD_INPUT = [
    (
        [
            "incident",
            "resolve-side-effect",
            "INC-1",
            "se-1",
            "--outcome",
            "not-applied",
            "--evidence",
            "",
        ],
        "--evidence must not be empty",
    ),
    (
        [
            "incident",
            "resolve-side-effect",
            "INC-1",
            "se-1",
            "--outcome",
            "maybe",
            "--evidence",
            "x",
        ],
        "--outcome must be applied or not-applied",
    ),
    (
        [
            "incident",
            "confirm",
            "INC-1",
            "--root-cause",
            "",
            "--fix-version",
            "v18",
            "--verified-by",
            "me",
        ],
        "--root-cause must not be empty",
    ),
    (
        [
            "incident",
            "confirm",
            "INC-1",
            "--root-cause",
            "x",
            "--fix-version",
            " ",
            "--verified-by",
            "me",
        ],
        "--fix-version must not be empty",
    ),
    (["incident", "open", "run-1", "--counterfactual", "prompt"], "--counterfactual 'prompt'"),
    (["regress", "--candidate", "prompt=v99"], "v99"),
    (["regress"], "--candidate"),
    (["regress", "--candidate", "prompt=v18", "--graph", "nope"], "--graph 'nope'"),
    (["regress", "--candidate", "prompt=v18", "--agent", "tool-loop"], "prompt bundle 'v18'"),
    (["replay", "start", "run-1", "--max-cost", "lots"], "--max-cost must be a number"),
    (["replay", "start", "run-1", "--mode", "prompt-swap"], "--mode prompt-swap needs --prompt"),
    (["runs", "show", "run-nope"], "run not found"),
    (["runs", "verify", "run-nope"], "run not found"),
    (["evidence", "show", "run-nope", "1"], "run-nope"),
    (["report", "INC-nope", "--format", "pdf"], "--format"),
    (["worker", "--queue", "sideways"], "--queue"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_INPUT, ids=[" ".join(a[:2]) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str, tmp_path: Path) -> None:
    """In this process (the commands are the same; starting ~20 processes is slow here)."""
    env = {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_LOG_FORMAT": "json"}
    assert_one_line_refusal(CliRunner().invoke(app, args, env=env), 2, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (BAD_INPUT[0][0], "--evidence must not be empty"),
        (["regress", "--candidate", "prompt=v99"], "prompt=v99"),
        (["worker", "--queue", "sideways"], "--queue"),
    ],
)
def test_bad_input_as_a_user_types_it(args: list[str], needle: str, tmp_path: Path) -> None:
    assert_one_line_refusal(run(args, tmp_path), 2, needle)


def test_an_unreachable_temporal_is_exit_4(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    env_dir = tmp_path / "dev"
    env_dir.mkdir()
    (env_dir / "env").write_text(f"TEMPORAL_ADDRESS=127.0.0.1:{port}\n")
    for args in (["replay", "status", "replay-1"], ["incident", "status", "INC-1"]):
        line = assert_one_line_refusal(run(args, tmp_path), 4, "Temporal is not reachable")
        assert re.search(rf"127\.0\.0\.1:{port}", line), line


def test_every_option_has_help() -> None:
    def options(group: Any, prefix: str = "") -> list[str]:
        found = []
        for name, command in group.commands.items():
            path = f"{prefix}{name}"
            found += [
                f"{path} {p.opts[0]}"
                for p in command.params
                if getattr(p, "param_type_name", "") == "option" and not p.help
            ]
            if hasattr(command, "commands"):
                found += options(command, f"{path} ")
        return found

    assert options(typer.main.get_group(app)) == []


def test_denying_an_approval_the_run_never_recorded_is_refused(tmp_path: Path) -> None:
    agent = run(
        ["agent", "run", "support-desk", "--scenario", "happy", "--seed", "2", "--json"], tmp_path
    )
    assert agent.returncode == 0, agent.stderr.decode()
    run_id = json.loads(agent.stdout)["run_id"]
    refused = run(
        ["replay", "start", run_id, "--mode", "exact", "--deny-approval", "email.send"], tmp_path
    )
    line = assert_one_line_refusal(refused, 2, "--deny-approval email.send")
    assert "approved: payment.refund" in line


def test_retrying_an_ingested_write_says_there_is_no_provider_for_it(tmp_path: Path) -> None:
    trace = sorted((unpacked_testdata() / "otel-any-agent").glob("*_trace.json"))[0]
    imported = run(
        ["import", "otel", str(trace), "--write-tools", "write_file", "--json"], tmp_path
    )
    assert imported.returncode == 0, imported.stderr.decode()
    (run_id,) = json.loads(imported.stdout)["run_ids"]
    shown = run(["runs", "show", run_id, "--json"], tmp_path)
    (effect,) = json.loads(shown.stdout)["side_effects"]
    refused = run(["side-effects", "retry", effect["side_effect_id"]], tmp_path)
    line = assert_one_line_refusal(refused, 2, effect["side_effect_id"], "write_file")
    assert "ingested from otel" in line and "no provider for it" in line, line
    # refused before anything was read: the audit trail has no entry
    audit = run(["audit", "--json"], tmp_path)
    assert audit.returncode == 0 and json.loads(audit.stdout) == {"audit": []}, audit.stdout
