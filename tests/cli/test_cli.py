"""The ``replaybook`` command as a user runs it: a real process, a real SQLite file."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def run(
    args: list[str],
    home: Path,
    stdin: bytes | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))} | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        # the local model server has tests of its own (tests/local_models)
        "REPLAYBOOK_LOCAL_MODELS": "off",
    }
    env |= extra_env or {}
    return subprocess.run(
        [REPLAYBOOK, *args], input=stdin, capture_output=True, env=env, cwd=ROOT, timeout=120
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def demo_run(home: Path) -> str:
    result = run(["demo", "--sample-only"], home)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert any(line.startswith("verify run-") and ": intact:" in line for line in lines)
    return next(line.split()[1] for line in lines if line.startswith("recorded "))


def test_canonical_from_stdin(home: Path) -> None:
    result = run(["canonical", "-"], home, stdin=b'{"b":2,"a":1.0}')
    assert result.returncode == 0
    assert result.stdout == b'{"a":1,"b":2}'


def test_canonical_hash_and_file(home: Path, tmp_path: Path) -> None:
    doc = tmp_path / "doc.json"
    doc.write_bytes(b'{ "b" : 2, "a" : 1e0 }')
    result = run(["canonical", str(doc), "--hash"], home)
    assert result.returncode == 0
    import hashlib

    assert result.stdout.decode() == "sha256:" + hashlib.sha256(b'{"a":1,"b":2}').hexdigest() + "\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (b'{"a":1,"a":2}', b"duplicate"),
        (b'{"a":NaN}', b"NaN"),
        (b'{"a":9007199254740993}', b"safe range"),
        (b'{"a":', b"line 1"),
        (b'["\\ud800"]', b"surrogate"),
    ],
)
def test_canonical_bad_input_exits_2_with_the_reason(
    home: Path, text: bytes, needle: bytes
) -> None:
    result = run(["canonical", "-"], home, stdin=text)
    assert result.returncode == 2
    assert result.stdout == b""
    assert needle.lower() in result.stderr.lower(), result.stderr


def test_canonical_missing_file_exits_2(home: Path) -> None:
    result = run(["canonical", "/no/such/file.json"], home)
    assert result.returncode == 2 and b"cannot read" in result.stderr


def test_runs_list_show_verify(home: Path, demo_run: str) -> None:
    listed = json.loads(run(["runs", "list", "--json"], home).stdout)
    assert demo_run in [r["run_id"] for r in listed["runs"]]
    shown = run(["runs", "show", demo_run, "--json"], home)
    assert shown.returncode == 0
    view = json.loads(shown.stdout)
    assert view["event_count"] == 12 and len(view["events"]) == 12
    assert view["pinned"]["policy_version"] == "refunds-v3"
    assert [s["status"] for s in view["side_effects"]] == ["CONFIRMED"]
    verified = run(["runs", "verify", demo_run], home)
    assert verified.returncode == 0
    assert verified.stdout.decode().startswith("intact: 12 events, head sha256:")
    as_json = json.loads(run(["runs", "verify", demo_run, "--json"], home).stdout)
    assert as_json["intact"] is True and as_json["head_hash"] == view["head_hash"]


def test_verify_names_the_sequence_edited_in_sqlite(tmp_path: Path) -> None:
    home = tmp_path / "home"
    demo = run(["demo", "--sample-only"], home)
    assert demo.returncode == 0, demo.stderr.decode()
    run_id = next(
        line.split()[1]
        for line in demo.stdout.decode().splitlines()
        if line.startswith("recorded ")
    )
    assert run(["runs", "verify", run_id], home).returncode == 0
    with sqlite3.connect(home / "replaybook.db") as conn:
        conn.execute(
            "UPDATE execution_events SET payload_hash=? WHERE run_id=? AND sequence=3",
            ("sha256:" + "0" * 64, run_id),
        )
    result = run(["runs", "verify", run_id], home)
    assert result.returncode == 1
    assert result.stdout.decode().startswith("broken at sequence 3: payload hash mismatch")
    detail = json.loads(run(["runs", "verify", run_id, "--json"], home).stdout)
    assert detail["broken_at"] == 3 and detail["intact"] is False


def test_unknown_run_is_bad_input(home: Path) -> None:
    result = run(["runs", "verify", "run-does-not-exist"], home)
    assert result.returncode == 2
    assert b"run not found: 'run-does-not-exist'" in result.stderr


def test_bad_database_url_is_named(tmp_path: Path) -> None:
    env_home = tmp_path / "h"
    result = subprocess.run(
        [REPLAYBOOK, "runs", "list"],
        capture_output=True,
        env={
            **os.environ,
            "REPLAYBOOK_HOME": str(env_home),
            "REPLAYBOOK_DATABASE_URL": "mysql://x",
        },
        timeout=60,
    )
    assert result.returncode == 2
    assert b"unsupported database 'mysql'" in result.stderr


def test_demo_with_artifacts_on_seaweedfs(tmp_path: Path, seaweedfs) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))} | {
        "REPLAYBOOK_HOME": str(tmp_path / "home"),
        "REPLAYBOOK_ARTIFACTS": "s3://rb-demo-artifacts/evidence",
        "REPLAYBOOK_S3_ENDPOINT_URL": seaweedfs.endpoint_url,
        "AWS_ACCESS_KEY_ID": seaweedfs.access_key,
        "AWS_SECRET_ACCESS_KEY": seaweedfs.secret_key,
    }
    result = subprocess.run(
        [REPLAYBOOK, "demo", "--sample-only"], capture_output=True, env=env, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert "artifacts: s3://rb-demo-artifacts/evidence" in out
    assert ": intact: 12 events" in out
