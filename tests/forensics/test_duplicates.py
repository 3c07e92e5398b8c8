"""Duplicate writes flagged: ``models.duplicates`` (pure), ``forensics expected`` findings,
``forensics evaluate`` counts and ``runs show`` (human and --json ``duplicates``)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

from integrations.tau_bench.evaluate import evaluate_runs
from integrations.tau_bench.forensics import compare_expected
from integrations.tau_bench.sources import load_json, runs_from_file
from models.duplicates import duplicate_calls, duplicate_side_effects, key_arguments
from models.enums import SideEffectStatus
from models.evidence import SideEffectRecord
from tests.testdata import unpacked_testdata

ROOT = Path(__file__).resolve().parents[2]
DATA = unpacked_testdata()
MULTI = DATA / "replaybook-written" / "airline-multi-booking.json"
TOOLS = DATA / "tau-bench" / "tools_info.json"
HASH_A, HASH_B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def _effect(n: int, action_hash: str, status: SideEffectStatus) -> SideEffectRecord:
    return SideEffectRecord(
        side_effect_id=f"se-{n}",
        run_id="r",
        step_id=f"s{n}",
        capability_id="book",
        idempotency_key=f"k{n}",
        action_hash=action_hash,
        status=status,
    )


def test_same_action_hash_applied_twice_is_a_duplicate() -> None:
    c, f = SideEffectStatus.CONFIRMED, SideEffectStatus.FAILED
    effects = [_effect(1, HASH_A, c), _effect(2, HASH_B, c), _effect(3, HASH_A, c)]
    (dup,) = duplicate_side_effects([*effects, _effect(4, HASH_B, f)])
    assert (dup.action_hash, dup.side_effect_ids, dup.severity) == (
        HASH_A,
        ("se-1", "se-3"),
        "critical",
    )


def test_near_duplicates_share_their_key_arguments() -> None:
    trip = {"user_id": "u", "flights": [{"n": 1}], "insurance": "no", "amount": 3}
    assert key_arguments(trip) == {"user_id": "u", "flights": [{"n": 1}]}
    found = duplicate_calls([("book", trip, 2), ("book", {**trip, "amount": 4}, 6)])
    assert [(d.kind, d.message_indexes) for d in found] == [("same_key_arguments", (2, 6))]
    exact = duplicate_calls([("book", trip, 2), ("book", copy.deepcopy(trip), 6)])
    assert [(d.kind, d.message_indexes) for d in exact] == [("same_action", (2, 6))]
    # no key argument, or another target: never a duplicate
    assert duplicate_calls([("calc", {"x": 1}, 1), ("calc", {"x": 2}, 3)]) == []
    assert duplicate_calls([("book", trip, 1), ("book", {**trip, "user_id": "v"}, 3)]) == []


def _booked_twice() -> list[dict]:
    """The written multi-booking run with its first successful booking made a second time."""
    record = copy.deepcopy(load_json(MULTI)[0])
    traj = record["traj"]
    booking, answer = traj[8], traj[9]  # the HATHAT booking and its answer
    traj[10:10] = [copy.deepcopy(booking), copy.deepcopy(answer)]
    record["task_id"] = 901
    return [record]


def test_forensics_expected_flags_the_duplicate_and_evaluate_counts_it(tmp_path: Path) -> None:
    path = tmp_path / "booked-twice.json"
    path.write_text(json.dumps(_booked_twice()), encoding="utf-8")
    (run,) = runs_from_file(path, "airline", load_json(TOOLS))
    findings = compare_expected(run).findings
    exact = [f for f in findings if f.kind == "same_action"]
    assert [(f.code, f.severity, f.tool, f.message_indexes) for f in exact] == [
        ("SIDE_EFFECT_DUPLICATE", "critical", "book_reservation", (8, 10))
    ]
    # two certificates to the same user: a near duplicate
    assert any(f.tool == "send_certificate" and f.kind == "same_key_arguments" for f in findings)
    summary = evaluate_runs([run])
    assert summary["duplicates"]["runs"] == 1
    assert summary["duplicates"]["findings"] == len(findings)


def test_runs_show_lists_the_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "booked-twice.json"
    path.write_text(json.dumps(_booked_twice()), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))}
    env |= {"REPLAYBOOK_HOME": str(tmp_path / "home"), "REPLAYBOOK_LOG_FORMAT": "json"}
    cli = str(Path(sys.executable).parent / "replaybook")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [cli, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return done

    imported = run(
        "import", "tau-bench", str(path), "--domain", "airline", "--tools-info", str(TOOLS),
        "--json",
    )  # fmt: skip
    (run_id,) = json.loads(imported.stdout)["run_ids"]
    view = json.loads(run("runs", "show", run_id, "--json").stdout)
    (dup,) = view["duplicates"]
    bookings = [e for e in view["side_effects"] if e["side_effect_id"] in dup["side_effect_ids"]]
    assert len(bookings) == 2 and {e["action_hash"] for e in bookings} == {dup["action_hash"]}
    assert all(e["capability_id"] == "book_reservation" for e in bookings)
    human = run("runs", "show", run_id).stdout
    assert "CRITICAL duplicate write" in human and dup["action_hash"] in human
