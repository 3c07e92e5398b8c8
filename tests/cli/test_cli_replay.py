"""``replaybook dev up`` with the real worker, then replays from the command line, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.ports import free_ports
from tests.cli.test_cli import run

TEMPORAL = str(Path(sys.executable).parent / "temporal")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    home = tmp_path_factory.mktemp("replay-cli")
    port, ui_port = free_ports(2)
    up = run(["dev", "up", "--temporal-port", str(port), "--ui-port", str(ui_port), "--json"], home)
    assert up.returncode == 0, up.stdout.decode() + up.stderr.decode()
    try:
        yield home, port
    finally:
        down = run(["dev", "down"], home)
        assert down.returncode == 0, down.stderr.decode()


def json_of(result: subprocess.CompletedProcess[bytes], code: int = 0) -> dict:
    assert result.returncode == code, result.stdout.decode() + result.stderr.decode()
    return json.loads(result.stdout)


def wrong_customer_run(home: Path) -> str:
    for seed in range(20):
        view = json_of(
            run(
                [
                    "agent",
                    "run",
                    "support-desk",
                    "--scenario",
                    "wrong-customer",
                    "--seed",
                    str(seed),
                    "--json",
                ],
                home,
            )
        )
        if view["outcome"]["emailed"] == "bob@example.com":
            return view["run_id"]
    raise AssertionError("no run emailed the wrong customer")


def test_replays_from_the_command_line(stack: tuple[Path, int]) -> None:
    home, port = stack
    status = json_of(run(["dev", "status", "--json"], home))
    assert status["running"] is True and status["components"]["worker"]["alive"]
    run_id = wrong_customer_run(home)

    recorded = json_of(
        run(["replay", "start", run_id, "--mode", "recorded", "--wait", "--json"], home)
    )
    for field in (
        "replay_id",
        "status",
        "confidence",
        "completeness",
        "comparison",
        "writes_blocked",
        "fixture_misses",
        "budget_used",
    ):
        assert field in recorded, field
    assert recorded["status"] == "COMPLETED" and recorded["confidence"] == "FULL"
    assert recorded["completeness"] == "6/6" and recorded["writes_blocked"] == 1
    assert (
        recorded["comparison"]["same_side_effects"] and recorded["comparison"]["critical"] is False
    )

    swap = json_of(
        run(
            [
                "replay",
                "start",
                run_id,
                "--mode",
                "prompt-swap",
                "--prompt",
                "v18",
                "--on-fixture-miss",
                "sandbox-live",
                "--repeat",
                "5",
                "--wait",
                "--json",
            ],
            home,
        )
    )
    assert swap["summary"]["reproduced"] == 0 and swap["summary"]["runs"] == 5
    assert swap["summary"]["rate"] == 0.0 and len(swap["summary"]["ci95"]) == 2
    assert swap["comparison"]["critical"] is True

    shown = json_of(run(["replay", "status", recorded["replay_id"], "--json"], home))
    assert shown["status"] == "COMPLETED" and shown["comparison"] == recorded["comparison"]

    described = subprocess.run(
        [
            TEMPORAL,
            "workflow",
            "describe",
            "-w",
            recorded["replay_id"],
            "--address",
            f"127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert described.returncode == 0, described.stderr
    assert "Replay" in described.stdout and "COMPLETED" in described.stdout.upper()

    # the replay's trajectory is a verifiable run, listed with its kind, not among the sources
    listed = json.loads(run(["runs", "list", "--kind", "replay", "--json"], home).stdout)["runs"]
    assert {r["kind"] for r in listed} == {"replay"}
    assert recorded["replay_id"] in {r["run_id"] for r in listed}
    sources = json.loads(run(["runs", "list", "--json"], home).stdout)["runs"]
    assert run_id in {r["run_id"] for r in sources}
    assert {r["kind"] for r in sources} == {"source"}
    everything = json.loads(run(["runs", "list", "--all", "--json"], home).stdout)["runs"]
    assert len(everything) == len(sources) + len(listed)
    assert run(["runs", "verify", recorded["replay_id"]], home).returncode == 0


def test_bad_replay_requests_exit_2(stack: tuple[Path, int]) -> None:
    home, _ = stack
    missing = run(["replay", "start", "run-nope", "--wait"], home)
    assert missing.returncode == 2 and b"run not found: 'run-nope'" in missing.stderr
    no_prompt = run(["replay", "start", "run-nope", "--mode", "prompt-swap"], home)
    assert no_prompt.returncode == 2 and b"--mode prompt-swap needs --prompt" in no_prompt.stderr
    bad_mode = run(["replay", "start", "run-nope", "--mode", "sideways"], home)
    assert bad_mode.returncode == 2
    cost = run(["replay", "start", "run-nope", "--max-cost", "lots"], home)
    assert cost.returncode == 2 and b"--max-cost must be a number" in cost.stderr
    unknown = run(["replay", "status", "replay-nope"], home)
    assert unknown.returncode == 2 and b"replay not found" in unknown.stderr


def test_a_replay_of_a_tampered_run_fails_with_exit_1(stack: tuple[Path, int]) -> None:
    """Issue 20's acceptance, as issue 31 sharpened it: `replay start RUN --mode recorded
    --wait` of a tampered run exits 1 naming the sequence, refused before any replay starts."""
    import sqlite3

    home, _ = stack
    view = json_of(run(["agent", "run", "support-desk", "--scenario", "happy", "--json"], home))
    with sqlite3.connect(home / "replaybook.db") as conn:
        conn.execute(
            "UPDATE execution_events SET payload_hash=? WHERE run_id=? AND sequence=3",
            ("sha256:" + "0" * 64, view["run_id"]),
        )
    started = run(["replay", "start", view["run_id"], "--mode", "recorded", "--wait"], home)
    assert started.returncode == 1, started.stdout.decode() + started.stderr.decode()
    assert b"does not verify" in started.stderr and b"sequence 3" in started.stderr
    assert b"Traceback" not in started.stderr and b"started replay" not in started.stdout


def test_a_running_replay_shows_its_progress(stack: tuple[Path, int]) -> None:
    """`replay status --json` of a running --repeat replay: child replays done of the total
    (and the source run's step count); the JSON stays pure (no progress bar off a terminal)."""
    home, _ = stack
    view = json_of(run(["agent", "run", "support-desk", "--scenario", "happy", "--json"], home))
    started = json_of(
        run(
            ["replay", "start", view["run_id"], "--mode", "exact", "--repeat", "40", "--json"], home
        )
    )
    status = json_of(run(["replay", "status", started["replay_id"], "--json"], home))
    assert status["status"] in ("CREATED", "PREPARING", "RUNNING", "COMPARING"), status
    progress = status["progress"]
    assert progress["children_total"] == 40 and 0 <= progress["children_done"] <= 40
    assert progress["steps_total"] == 6
    cancel = run(["replay", "cancel", started["replay_id"]], home)
    # the 40 children may all have finished since the status was read (a warm pool is quick)
    finished = cancel.returncode == 2 and b"has already finished" in cancel.stderr
    assert cancel.returncode == 0 or finished, cancel.stderr
