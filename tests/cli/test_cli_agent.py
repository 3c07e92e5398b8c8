"""``replaybook agent run``, ``side-effects retry`` and ``examples providers`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import run


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-home")


def agent_run(home: Path, *args: str) -> dict:
    result = run(["agent", "run", "support-desk", *args, "--json"], home)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_agent_run_records_a_complete_run(home: Path) -> None:
    view = agent_run(home, "--scenario", "happy", "--seed", "4")
    assert view["status"] == "COMPLETED"
    assert view["outcome"]["emailed"] == "ada@example.com"
    assert {(e["capability"], e["status"]) for e in view["side_effects"]} == {
        ("payment.refund", "CONFIRMED"),
        ("email.send", "CONFIRMED"),
    }
    shown = json.loads(run(["runs", "show", view["run_id"], "--json"], home).stdout)
    assert shown["graph_id"] == "support-desk" and shown["graph_version"] == "1"
    assert shown["event_count"] == view["event_count"] > 20
    assert shown["evidence_completeness"]["summary"] == "6/6"
    assert shown["evidence_completeness"]["confidence"] == "FULL"
    assert shown["pinned"]["model_profile"].startswith("scripted:")
    assert shown["pinned"]["capability_registry_version"] and shown["pinned"]["knowledge_snapshot"]
    assert len(shown["prompt_artifacts"]) == 2 and len(shown["fixtures"]) == 3
    assert [s["status"] for s in shown["side_effects"]] == ["CONFIRMED", "CONFIRMED"]
    assert shown["approvals"] and shown["approvals"][0]["approver"].startswith("supervisor@acme")
    assert run(["runs", "verify", view["run_id"]], home).returncode == 0


def test_refund_timeout_retry_is_refused_and_reaches_no_provider(home: Path) -> None:
    view = agent_run(home, "--scenario", "refund-timeout", "--seed", "2")
    (effect,) = view["side_effects"]
    assert effect["status"] == "UNKNOWN"
    before = json.loads(run(["examples", "providers", "--json"], home).stdout)
    refunds = [r for r in before["refunds"] if r["order_id"].startswith("O-3003")]
    assert len(refunds) == 1 and refunds[0]["count_for_order"] == 1

    retried = run(["side-effects", "retry", effect["id"]], home)
    assert retried.returncode == 3
    assert b"reconciliation required" in retried.stderr
    # refused before its raw arguments were decrypted: the audit records no read for it
    audit = run(["audit", "--json"], home)
    assert audit.returncode == 0 and effect["id"] not in audit.stdout.decode()
    assert "proved not applied" not in audit.stdout.decode()

    after = json.loads(run(["examples", "providers", "--json"], home).stdout)
    assert after["calls"] == before["calls"]
    assert after["refunds"] == before["refunds"]


def test_wrong_customer_and_bad_arguments(home: Path) -> None:
    v17 = agent_run(home, "--scenario", "wrong-customer", "--seed", "0")
    v18 = agent_run(home, "--scenario", "wrong-customer", "--prompt", "v18", "--seed", "0")
    assert v18["outcome"]["emailed"] == "carol@example.com"
    assert v17["outcome"]["emailed"] in {"bob@example.com", "carol@example.com"}
    state = json.loads(run(["examples", "providers", "--json"], home).stdout)
    assert {"to": "carol@example.com"}.items() <= next(
        e for e in state["emails"] if e["to"] == "carol@example.com"
    ).items()

    bad = run(["agent", "run", "support-desk", "--scenario", "nope"], home)
    assert bad.returncode == 2 and b"unknown scenario 'nope'" in bad.stderr
    bad = run(["agent", "run", "other-agent"], home)
    assert bad.returncode == 2 and b"unknown agent 'other-agent'" in bad.stderr
    bad = run(["agent", "run", "support-desk", "--prompt", "v99"], home)
    assert bad.returncode == 2 and b"unknown prompt bundle 'v99'" in bad.stderr
    missing = run(["side-effects", "retry", "se-nope"], home)
    assert missing.returncode == 2 and b"'se-nope' is not recorded" in missing.stderr
