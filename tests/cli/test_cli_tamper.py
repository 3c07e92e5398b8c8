"""The acceptance of issue #13 as a user runs it: tampering in the SQLite file and the artifact
directory is named by ``runs verify`` and refused by ``side-effects retry``; anchors catch a
cut tail."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.cli.test_cli import run


def agent_run(home: Path, *args: str) -> dict:
    result = run(["agent", "run", "support-desk", *args, "--json"], home)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_a_side_effect_edited_in_sql_is_named_and_not_retried(tmp_path: Path) -> None:
    home = tmp_path / "home"
    view = agent_run(home, "--scenario", "refund-timeout", "--seed", "21")
    (effect,) = view["side_effects"]
    assert effect["status"] == "UNKNOWN"
    with sqlite3.connect(home / "replaybook.db") as conn:
        conn.execute(
            "UPDATE side_effects SET status='FAILED', record=json_set(record, '$.status', "
            "'FAILED') WHERE side_effect_id=?",
            (effect["id"],),
        )
    verified = run(["runs", "verify", view["run_id"]], home)
    assert verified.returncode == 1
    assert (
        f"side effect {effect['id']} status FAILED disagrees with the chained event (UNKNOWN)"
        in verified.stdout.decode()
    )
    report = json.loads(run(["runs", "verify", view["run_id"], "--json"], home).stdout)
    assert report["intact"] is False and report["run_id"] == view["run_id"]
    assert set(report["checked"]) == {
        "events",
        "payloads",
        "artifacts",
        "projections",
        "anchors",
        "raw_payloads",
    }
    assert report["problems"][0]["kind"] == "side_effects"

    before = json.loads(run(["examples", "providers", "--json"], home).stdout)
    retried = run(["side-effects", "retry", effect["id"]], home)
    assert retried.returncode == 1
    assert b"does not verify" in retried.stderr and effect["id"].encode() in retried.stderr
    after = json.loads(run(["examples", "providers", "--json"], home).stdout)
    assert after["refunds"] == before["refunds"] and after["calls"] == before["calls"]


def test_a_cut_tail_with_a_rewritten_head_disagrees_with_the_anchor(tmp_path: Path) -> None:
    home = tmp_path / "home"
    view = agent_run(home, "--scenario", "happy", "--seed", "3")
    run_id, n = view["run_id"], view["event_count"]
    anchors = run(["anchors", "verify", "--json"], home)
    assert anchors.returncode == 0, anchors.stdout
    assert json.loads(anchors.stdout)["intact"] is True
    with sqlite3.connect(home / "replaybook.db") as conn:
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute("DELETE FROM execution_events WHERE run_id=? AND sequence>?", (run_id, n - 3))
        conn.execute(
            "UPDATE runs SET head_sequence=?, head_hash=(SELECT hash FROM execution_events "
            "WHERE run_id=? AND sequence=?) WHERE run_id=?",
            (n - 3, run_id, n - 3, run_id),
        )
    verified = run(["runs", "verify", run_id], home)
    assert verified.returncode == 1
    assert verified.stdout.decode().startswith(
        f"broken at sequence {n}: anchor at sequence {n} says head sha256:"
    )
    anchors = run(["anchors", "verify", "--json"], home)
    assert anchors.returncode == 1
    assert json.loads(anchors.stdout)["problems"][0]["kind"] == "anchor"
    written = run(["anchors", "write", "--all", "--json"], home)
    assert written.returncode == 1 and b"refusing to anchor" in written.stderr


def test_a_forged_header_outcome_and_a_deleted_subject_are_named(tmp_path: Path) -> None:
    """Issue 31: the header's outcome and a ``run_subjects`` row edited in SQL are named by
    ``runs verify`` (exit 1), and ``runs show`` flags the header instead of showing it as is."""
    home = tmp_path / "home"
    view = agent_run(home, "--scenario", "happy", "--seed", "3")
    run_id = view["run_id"]
    with sqlite3.connect(home / "replaybook.db") as conn:
        subjects = conn.execute("SELECT count(*) FROM run_subjects WHERE run_id=?", (run_id,))
        assert subjects.fetchone()[0] >= 1
        conn.execute(
            "UPDATE runs SET record=json_set(record, '$.outcome', 'forged') WHERE run_id=?",
            (run_id,),
        )
        conn.execute("DELETE FROM run_subjects WHERE run_id=?", (run_id,))
    verified = run(["runs", "verify", run_id, "--json"], home)
    assert verified.returncode == 1
    messages = [p["message"] for p in json.loads(verified.stdout)["problems"]]
    assert any("run header outcome forged disagrees" in m for m in messages), messages
    assert any("has no run_subjects row" in m for m in messages), messages
    shown = run(["runs", "show", run_id], home)
    assert b"DOES NOT VERIFY (the header shown may be forged)" in shown.stdout
