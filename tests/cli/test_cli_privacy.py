"""``replaybook evidence``, ``audit``, ``privacy …`` and ``runs show`` subjects as a user runs
them: a real process over a real SQLite file, the development KEK under REPLAYBOOK_HOME."""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import json
import sqlite3
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.cli.test_cli import run

PHONE = "+1-555-0199"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("privacy-home")


def ok(result) -> dict:
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def record(home: Path, scenario: str) -> str:
    view = ok(run(["agent", "run", "support-desk", "--scenario", scenario, "--json"], home))
    return view["run_id"]


def redacted_sequence(home: Path, run_id: str) -> int:
    """The first event of the run whose raw payload differs from its sanitized one."""
    with sqlite3.connect(home / "replaybook.db") as db:
        (seq,) = db.execute(
            "SELECT min(sequence) FROM raw_payloads WHERE run_id = ? AND sequence IS NOT NULL "
            "AND raw_hash != sanitized_hash",
            (run_id,),
        ).fetchone()
    assert seq is not None, "the wrong-customer run keeps an encrypted raw payload"
    return int(seq)


@pytest.fixture(scope="module")
def wrong_customer(home: Path) -> tuple[str, int]:
    run_id = record(home, "wrong-customer")
    return run_id, redacted_sequence(home, run_id)


def test_runs_show_lists_the_data_subjects(home: Path, wrong_customer: tuple[str, int]) -> None:
    shown = ok(run(["runs", "show", wrong_customer[0], "--json"], home))
    assert [(s["subject_id"], s["kind"], s["primary"]) for s in shown["subjects"]] == [
        ("customer:C-2002", "END_USER", True),
        # the phone lookup returned Bob's record too: a third party whose data the run holds
        ("customer:C-2001", "PERSON", False),
        ("tenant:acme", "TENANT", False),
    ]


def test_evidence_show_is_sanitized_raw_needs_a_reason_and_is_audited(
    home: Path, wrong_customer: tuple[str, int]
) -> None:
    run_id, seq = wrong_customer
    sanitized = ok(run(["evidence", "show", run_id, str(seq), "--json"], home))
    assert sanitized["view"] == "sanitized" and sanitized["raw_state"] == "AVAILABLE"
    assert sanitized["redaction_policy_version"] == "redact-v2"
    assert PHONE not in json.dumps(sanitized["payload"]) and "<phone:" in json.dumps(sanitized)
    assert sanitized["raw_hash"] != sanitized["sanitized_hash"]

    no_reason = run(["evidence", "show", run_id, str(seq), "--raw"], home)
    assert no_reason.returncode == 2 and b"--reason" in no_reason.stderr
    assert no_reason.stdout == b""

    raw = ok(
        run(
            ["evidence", "show", run_id, str(seq), "--raw", "--reason", "INC-7 review", "--json"],
            home,
        )
    )
    assert raw["view"] == "raw" and PHONE in json.dumps(raw["payload"])
    human = run(["evidence", "show", run_id, str(seq), "--raw", "--reason", "second look"], home)
    assert human.returncode == 0 and PHONE.encode() in human.stdout

    audit = ok(run(["audit", "--json"], home))["audit"]
    mine = [a for a in audit if a["run_id"] == run_id and a["sequence"] == seq]
    assert [(a["reason"], a["outcome"]) for a in mine] == [
        ("INC-7 review", "READ"),
        ("second look", "READ"),
    ]
    first = mine[0]
    assert first["actor"] == f"cli:{getpass.getuser()}" and first["action"] == "raw_read"
    assert abs(datetime.fromisoformat(first["at"]) - datetime.now().astimezone()) < timedelta(
        minutes=5
    )
    table = run(["audit"], home)
    assert table.returncode == 0 and b"INC-7 review" in table.stdout


def test_hold_refuses_deletion_naming_the_hold_and_destroys_nothing(
    home: Path, wrong_customer: tuple[str, int]
) -> None:
    run_id, seq = wrong_customer
    bad = run(["privacy", "hold", run_id, "--reason", "x", "--until", "soon"], home)
    assert bad.returncode == 2 and b"--until" in bad.stderr
    hold = ok(
        run(
            [
                "privacy",
                "hold",
                run_id,
                "--reason",
                "litigation L-1",
                "--until",
                "2999-01-01",
                "--json",
            ],
            home,
        )
    )
    assert hold["run_id"] == run_id and hold["until"].startswith("2999-01-01")
    assert hold["objects_held"] > 0

    refused = run(
        ["privacy", "delete-subject", "customer:C-2002", "--request-id", "DSR-held"], home
    )
    assert refused.returncode == 2
    assert hold["hold_id"].encode() in refused.stderr and b"litigation L-1" in refused.stderr
    # nothing was destroyed: raw still reads, no receipt was written
    still = ok(
        run(["evidence", "show", run_id, str(seq), "--raw", "--reason", "check", "--json"], home)
    )
    assert PHONE in json.dumps(still["payload"])
    with sqlite3.connect(home / "replaybook.db") as db:
        assert db.execute("SELECT count(*) FROM deletion_receipts").fetchone() == (0,)
        assert db.execute(
            "SELECT count(*) FROM data_keys WHERE wrapped_key IS NULL"
        ).fetchone() == (0,)

    released = ok(run(["privacy", "release", run_id, "--json"], home))
    assert [h["hold_id"] for h in released["released"]] == [hold["hold_id"]]
    assert released["still_held"] == []


def test_delete_subject_writes_a_receipt_keeps_verify_and_raw_says_destroyed(
    home: Path, wrong_customer: tuple[str, int]
) -> None:
    run_id, seq = wrong_customer
    receipt = ok(
        run(
            ["privacy", "delete-subject", "customer:C-2002", "--request-id", "DSR-1", "--json"],
            home,
        )
    )
    assert receipt["request_id"] == "DSR-1" and receipt["subject_id"] == "customer:C-2002"
    assert run_id in receipt["runs"] and receipt["raw_payloads_destroyed"] > 0
    assert receipt["data_keys_destroyed"] >= 1

    verify = run(["runs", "verify", run_id], home)
    assert verify.returncode == 0 and b"intact" in verify.stdout

    raw = run(["evidence", "show", run_id, str(seq), "--raw", "--reason", "DSR audit"], home)
    assert raw.returncode == 2
    expected = f"destroyed by deletion request DSR-1 at {receipt['executed_at']}"
    assert expected.encode() in raw.stderr, raw.stderr
    sanitized = ok(run(["evidence", "show", run_id, str(seq), "--json"], home))
    assert sanitized["raw_state"] == "DESTROYED" and expected in sanitized["raw_destroyed"]
    audit = ok(run(["audit", "--json"], home))["audit"]
    assert any(a["reason"] == "DSR audit" and a["outcome"] == "DESTROYED" for a in audit)
    # the same request again answers with the same receipt
    again = ok(
        run(
            ["privacy", "delete-subject", "customer:C-2002", "--request-id", "DSR-1", "--json"],
            home,
        )
    )
    assert again == receipt


def _age(home: Path, run_id: str, days: int) -> None:
    """Make the run look recorded ``days`` ago (retention is measured from created_at)."""
    with sqlite3.connect(home / "replaybook.db") as db:
        (created,) = db.execute(
            "SELECT created_at FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        older = datetime.fromisoformat(str(created)) - timedelta(days=days)
        db.execute(
            "UPDATE runs SET created_at = ? WHERE run_id = ?",
            (older.isoformat(sep=" "), run_id),
        )


def test_privacy_sweep_destroys_expired_raw_content_and_keeps_held_runs(home: Path) -> None:
    fresh, expired, held = (record(home, "happy") for _ in range(3))
    _age(home, expired, 91)  # STANDARD is kept 90 days
    _age(home, held, 91)
    ok(run(["privacy", "hold", held, "--reason", "regulator request", "--json"], home))
    swept = ok(run(["privacy", "sweep", "--json"], home))
    destroyed = {d["run_id"]: d for d in swept["destroyed"]}
    assert expired in destroyed and destroyed[expired]["class"] == "STANDARD"
    assert destroyed[expired]["raw_payloads"] > 0
    assert fresh not in destroyed and held not in destroyed
    assert held in {h["run_id"] for h in swept["held"]}
    seq = redacted_sequence(home, expired)
    shown = ok(run(["evidence", "show", expired, str(seq), "--json"], home))
    assert shown["raw_state"] == "DESTROYED"
    assert run(["runs", "verify", expired], home).returncode == 0
    assert (
        ok(run(["evidence", "show", fresh, str(redacted_sequence(home, fresh)), "--json"], home))[
            "raw_state"
        ]
        == "AVAILABLE"
    )
    again = ok(run(["privacy", "sweep", "--json"], home))
    assert expired not in {d["run_id"] for d in again["destroyed"]}


async def _record_lost_email(home: Path) -> tuple[str, str]:
    """Record a wrong-customer run whose e-mail never reached the provider (the agent saw a
    timeout: UNKNOWN), then reconcile it: the reconciler finds no message (inconclusive) and a
    human records it not applied. Returns (run id, side effect id)."""
    from examples.support_desk.agent import SCENARIOS
    from examples.support_desk.providers import SimulatedWorld
    from examples.support_desk.spec import support_desk_spec
    from forensics.reconcile import reconcile_side_effect, resolve_by_human
    from models import SideEffectRecord, SideEffectStatus
    from models.errors import SideEffectOutcomeUnknownError
    from runtime.recorder import RunRecorder
    from runtime.session import record_run
    from stores.bundle import open_stores
    from stores.sql.support_desk_world import SqlWorldStore
    from tests.fixtures_replay import stack_settings
    from worker.agents import reconcilers_for

    async def lost(arguments: dict, context: object) -> dict:
        raise SideEffectOutcomeUnknownError("e-mail provider timed out (the request was lost)")

    async with open_stores(stack_settings(home, "127.0.0.1:1").stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        spec = support_desk_spec(world)
        spec = dataclasses.replace(spec, tool_providers={**spec.tool_providers, "email.send": lost})
        ticket = SCENARIOS["wrong-customer"] | {"ticket_id": f"T-lost-{uuid.uuid4().hex[:6]}"}
        result = await record_run(
            spec,
            stores.ledger,
            stores.artifacts,
            run_id=f"run-{uuid.uuid4().hex[:12]}",
            agent_input=ticket,
            seed=0,
            labels={"agent": "support-desk", "subject": "customer:C-2002", "tenant": "acme"},
        )
        (effect,) = [
            e
            for e in await stores.evidence.records(SideEffectRecord, result.run_id)
            if e.capability_id == "email.send"
        ]
        assert effect.status is SideEffectStatus.UNKNOWN
        recorder = RunRecorder(stores.ledger, stores.artifacts, result.run_id)
        recorder.step_id = effect.step_id
        run_record = await stores.ledger.get_run(result.run_id)
        done = await reconcile_side_effect(
            stores.evidence,
            recorder,
            reconcilers_for(run_record.graph_id, world.store),
            effect.side_effect_id,
        )
        # no message under that request: the reconciler cannot prove a negative, a human
        # decides (what ``incident resolve-side-effect --outcome not-applied`` records)
        assert done.needs_human and done.record.status is SideEffectStatus.UNKNOWN
        settled = await resolve_by_human(
            stores.evidence,
            recorder,
            effect.side_effect_id,
            applied=False,
            evidence_text="provider support confirms the request never arrived",
            resolved_by="dana",
        )
        assert settled.status is SideEffectStatus.RECONCILED
        assert settled.reconciled_applied is False
        return result.run_id, effect.side_effect_id


async def test_retry_of_an_effect_proved_not_applied_sends_the_raw_arguments_and_is_audited(
    tmp_path: Path,
) -> None:
    """The retry is the durable ``SideEffectRetry`` workflow: a real worker over this home's
    stores executes it while the CLI starts it and waits. The test has a Temporal dev server of
    its own: the session's server already has a worker on the control queue, over other stores."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    from devstack.temporal_server import start_temporal_dev_server
    from examples.support_desk.providers import CUSTOMERS
    from tests.fixtures_replay import stack_settings
    from worker.temporal import running_workers

    run_id, effect_id = await _record_lost_email(tmp_path)
    shared = {c["email"] for c in CUSTOMERS if c["phone"] == PHONE}
    before = ok(run(["examples", "providers", "--json"], tmp_path))
    assert before["emails"] == []  # the lost e-mail never reached the provider

    server = await asyncio.to_thread(
        start_temporal_dev_server, tmp_path / "temporal", headless=True
    )
    try:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        async with running_workers(stack_settings(tmp_path, server.address), "all", client):
            # the CLI blocks while it waits: run it off the loop the worker needs
            retried = ok(
                await asyncio.to_thread(
                    run,
                    ["side-effects", "retry", effect_id, "--json"],
                    tmp_path,
                    extra_env={"TEMPORAL_ADDRESS": server.address},
                )
            )
    finally:
        server.stop(timeout=10)
    assert retried["status"] == "CONFIRMED", retried
    after = ok(run(["examples", "providers", "--json"], tmp_path))
    (email,) = after["emails"]
    # the provider got the real address (from the encrypted raw payload), not a pseudonym
    assert email["to"] in shared and not email["to"].startswith("<")

    audit = ok(run(["audit", "--json"], tmp_path))["audit"]
    (read,) = [a for a in audit if a["run_id"] == run_id]
    assert read["actor"] == "side-effects-retry" and read["outcome"] == "READ"
    assert effect_id in read["reason"] and "proved not applied" in read["reason"]
    assert run(["runs", "verify", run_id], tmp_path).returncode == 0
