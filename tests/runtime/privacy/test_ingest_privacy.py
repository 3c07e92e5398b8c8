"""Ingested runs are private like recorded ones (issue 31, item 4), through the real API and
CLI: a header pinning ``redact-v1`` and an e-mail address in a user message → ``runs show``
serves ``<email:…>``, the address's pseudonym is a subject of the run, and ``privacy
delete-subject`` of the address destroys its raw content; the chain still verifies. A header
that pins nothing gets the configured default (``REPLAYBOOK_INGEST_REDACTION``), and retention
reaches it."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from api import create_app
from api.auth import parse_tokens
from api.config import ApiConfig
from models.redaction import address_subject
from tests.api.test_api_http import auth, settings_for
from tests.cli.test_cli import run
from tests.runtime.test_ingest import header, run_plain_agent

pytestmark = pytest.mark.asyncio(loop_scope="session")

ADDRESS = "ada.lovelace@example.com"
LINES = [f"I want italian food tonight, write to {ADDRESS}", "yes please", "thanks, bye"]


async def _ingest(home: Path, run_id: str, pinned: dict[str, str]) -> None:
    settings = settings_for(home, f"sqlite+aiosqlite:///{home / 'replaybook.db'}")
    app = create_app(settings, ApiConfig(tokens=parse_tokens("eng-token=engineer", "test")))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        head = header(run_id).model_dump(mode="json") | {
            "pinned": pinned,
            "system_prompt": f"You book tables. Escalations go to {ADDRESS}.",
            "attachments": {"customer": {"email": ADDRESS}},
        }
        created = await client.post("/api/runs", json=head, headers=auth("eng-token"))
        assert created.status_code == 201, created.text
        events = run_plain_agent(LINES).events
        sent = await client.post(
            f"/api/runs/{run_id}/events", json={"events": events}, headers=auth("eng-token")
        )
        assert sent.status_code == 201, sent.text
    await app.state.api.close()


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def _ok(args: list[str], home: Path) -> dict:
    result = run(args, home)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


async def test_an_ingested_run_is_redacted_and_deletion_reaches_it(tmp_path: Path) -> None:
    await _ingest(tmp_path, "ingested-pii", {"redaction_policy_version": "redact-v1"})
    await _ingest(tmp_path, "ingested-default", {})

    shown = run(["runs", "show", "ingested-pii", "--json"], tmp_path)
    assert shown.returncode == 0, shown.stderr.decode()
    assert b"<email:" in shown.stdout and ADDRESS.encode() not in shown.stdout
    view = json.loads(shown.stdout)
    assert view["pinned"]["redaction_policy_version"] == "redact-v1"
    subject = address_subject(ADDRESS)
    assert subject is not None
    assert subject in {s["subject_id"] for s in view["subjects"]}
    # nowhere in clear: not in the database files, not in a stored artifact (the context
    # snapshots' messages are sanitized too)
    assert _files_holding(tmp_path, ADDRESS.encode()) == []
    default = _ok(["runs", "show", "ingested-default", "--json"], tmp_path)
    assert default["pinned"]["redaction_policy_version"] == "redact-v1"  # the default

    # retention reaches an ingested run (both were started long ago; one is made recent)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    with sqlite3.connect(tmp_path / "replaybook.db") as db:
        db.execute("UPDATE runs SET created_at = ? WHERE run_id = 'ingested-pii'", (now,))
    swept = _ok(["privacy", "sweep", "--json"], tmp_path)
    assert [(d["run_id"], d["raw_payloads"] > 0) for d in swept["destroyed"]] == [
        ("ingested-default", True)
    ]

    receipt = _ok(
        ["privacy", "delete-subject", ADDRESS, "--request-id", "DSR-ada", "--json"], tmp_path
    )
    assert receipt["subject_id"] == subject  # the pseudonym: no address kept in clear
    # the same request again (it changes nothing) as a person reads it: the pseudonym too
    again = run(["privacy", "delete-subject", ADDRESS, "--request-id", "DSR-ada"], tmp_path)
    assert again.returncode == 0, again.stderr.decode()
    assert subject.encode() in again.stdout and ADDRESS.encode() not in again.stdout
    assert set(receipt["runs"]) == {"ingested-pii", "ingested-default"}
    assert receipt["raw_payloads_destroyed"] >= 1 and receipt["data_keys_destroyed"] == 1
    for run_id in receipt["runs"]:
        assert run(["runs", "verify", run_id], tmp_path).returncode == 0
    # the scope of raw content sealed for no declared subject is not a person
    refused = run(["privacy", "delete-subject", "subject:none", "--request-id", "X"], tmp_path)
    assert refused.returncode == 2 and b"not a person" in refused.stderr
