"""Writes are write-ahead: the intent is durable before the tool runs, and a write whose result
never comes ends UNKNOWN on the server, never missing, never retried: an exception in the
tool, a run that ends with the write open, an agent process killed between dispatch and
result (its spool flushed by ``replaybook-sdk flush``, then the lease sweep)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import replaybook

from models import SideEffectRecord
from stores.bundle import open_stores
from stores.sql.side_effect_leases import sweep_expired_side_effects
from tests.sdk.servers import ROOT, TOKEN, ApiProcess, ChatServer, poll
from worker.settings import Settings

SDK_CLI = str(Path(sys.executable).parent / "replaybook-sdk")


def _view(api: ApiProcess, run_id: str) -> dict[str, Any]:
    with api.client() as client:
        return client.get(f"/api/runs/{run_id}").json()


def test_a_write_that_raises_ends_unknown_and_a_refused_one_failed(
    api: ApiProcess, spool: Path
) -> None:
    @replaybook.tool(side_effect="write")
    def send_money(to: str, amount: int) -> str:
        if amount > 100:
            raise replaybook.WriteFailed("the bank refused: limit exceeded")
        raise TimeoutError("the bank did not answer")

    with replaybook.run(agent="payer", tools=[send_money]) as run:
        for amount in (5, 500):
            with pytest.raises((TimeoutError, replaybook.WriteFailed)):
                send_money("bob", amount)
    assert replaybook.flush(30)
    view = _view(api, run.run_id)
    effects = {e["side_effect_id"]: e for e in view["side_effects"]}
    assert sorted(e["status"] for e in effects.values()) == ["FAILED", "UNKNOWN"]
    fixtures = {f["sanitized_request"]["amount"]: f for f in view["fixtures"]}
    assert fixtures[5]["outcome"] == "ERROR"
    assert fixtures[5]["sanitized_response"] == "TimeoutError: the bank did not answer"
    assert view["status"] == "COMPLETED"


def _post(api: ApiProcess, path: str, body: dict[str, Any]) -> Any:
    with api.client() as client:
        return client.post(path, json=body)


def test_the_format_records_intents_results_and_unknown_at_run_end(api: ApiProcess) -> None:
    run_id = "write-ahead-format-1"
    header = {
        "run_id": run_id,
        "started_at": "2026-01-01T00:00:00Z",
        "tools": [{"name": "refund", "side_effect_class": "WRITE"}],
        "user_turns": False,
    }
    assert _post(api, "/api/runs", header).is_success
    intent = {"type": "tool_intent", "name": "refund", "arguments": {"order": "A"}}
    events = [
        {"sequence": 1, **intent, "idempotency_key": "key-1"},
        {"sequence": 2, **intent, "arguments": {"order": "B"}},
    ]
    assert _post(api, f"/api/runs/{run_id}/events", {"events": events}).is_success
    effects = {e["idempotency_key"]: e["status"] for e in _view(api, run_id)["side_effects"]}
    assert effects["key-1"] == "EXECUTING"
    # a result must name an open intent with the same name and arguments
    wrong = {"sequence": 3, "type": "tool_result", "tool_call_sequence": 1, "name": "refund"}
    answer = _post(api, f"/api/runs/{run_id}/events", {"events": [wrong]})
    assert answer.status_code == 422 and "differ from those of the intent" in answer.text
    result = {**wrong, "arguments": {"order": "A"}, "output": {"refund_id": "r-1"}}
    end = {"sequence": 4, "type": "run_end", "status": "FAILED", "error": "crashed"}
    answer = _post(api, f"/api/runs/{run_id}/events", {"events": [result, end]})
    assert answer.is_success, answer.text
    # sent again (a spool resent after a crash): accepted, nothing recorded twice
    again = _post(api, f"/api/runs/{run_id}/events", {"events": [*events, result, end]}).json()
    assert (again["recorded"], again["duplicates"]) == (0, 4)
    view = _view(api, run_id)
    effects = {e["idempotency_key"]: e for e in view["side_effects"]}
    assert effects["key-1"]["status"] == "CONFIRMED"
    (other,) = [e for k, e in effects.items() if k != "key-1"]
    assert other["status"] == "UNKNOWN"
    assert "run ended before the write's result" in other["provider_receipt"]
    assert [f["capability_id"] for f in view["fixtures"]] == ["refund"]


def test_a_model_call_of_an_older_client_is_still_recognised_when_resent(
    api: ApiProcess,
) -> None:
    """The fields added to ``model_call`` do not change the digest of an event without them."""
    run_id = "older-client-1"
    header = {"run_id": run_id, "started_at": "2026-01-01T00:00:00Z"}
    assert _post(api, "/api/runs", header).is_success
    call = {"sequence": 1, "type": "model_call", "model": "m", "content": "hi"}
    first = _post(api, f"/api/runs/{run_id}/events", {"events": [call]}).json()
    again = _post(api, f"/api/runs/{run_id}/events", {"events": [call]}).json()
    assert (first["recorded"], again["duplicates"]) == (1, 1)
    changed = {**call, "seed": 3}
    assert _post(api, f"/api/runs/{run_id}/events", {"events": [changed]}).status_code == 409


async def _sweep(api: ApiProcess) -> list[SideEffectRecord]:
    async with open_stores(Settings.from_env(api.env).stores) as stores:
        return await sweep_expired_side_effects(stores.ledger, lease_seconds=0.001)


def test_an_agent_killed_between_dispatch_and_result_ends_unknown(
    api: ApiProcess, tmp_path: Path
) -> None:
    """The agent's server is unreachable (nothing is sent before the kill): its intent exists
    only in the spool, fsync'ed before the refund ran. ``replaybook-sdk flush`` sends the run
    (the write EXECUTING on the server) and the lease sweep makes it UNKNOWN."""
    spool, marker = tmp_path / "spool", tmp_path / "dispatched"
    env = {
        **os.environ,
        "REPLAYBOOK_URL": "http://127.0.0.1:1",
        "REPLAYBOOK_TOKEN": TOKEN,
        "REPLAYBOOK_SPOOL_DIR": str(spool),
        "REFUND_AGENT_HANG": str(marker),
        "PYTHONPATH": str(ROOT),
    }
    with ChatServer() as chat:
        child = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/sdk/refund_agent.py"), chat.base_url],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            poll(marker.exists, "the refund to be dispatched", 60)
            (spooled,) = spool.glob("*.jsonl")
            lines = spooled.read_text().splitlines()
            assert lines[-1].startswith("e")  # an event line: "e" + its JSON
            intent = json.loads(lines[-1][1:])
            assert intent["type"] == "tool_intent"  # durable before the write ran
            assert intent["idempotency_key"] == marker.read_text()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
    run_id = spooled.name.removesuffix(".jsonl")
    flushed = subprocess.run(
        [SDK_CLI, "--url", api.url, "--spool-dir", str(spool), "--json", "flush"],
        env={**env, "REPLAYBOOK_URL": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert flushed.returncode == 0, flushed.stdout + flushed.stderr
    assert json.loads(flushed.stdout)["left"] == 0
    view = _view(api, run_id)
    (effect,) = view["side_effects"]
    assert (effect["status"], view["status"]) == ("EXECUTING", "RUNNING")
    assert [f["capability_id"] for f in view["fixtures"]] == ["lookup_order"]
    # the sweep the worker runs every half lease (and every store opening does)
    swept = asyncio.run(_sweep(api))
    assert effect["side_effect_id"] in {s.side_effect_id for s in swept}
    (effect,) = _view(api, run_id)["side_effects"]
    assert effect["status"] == "UNKNOWN"
    assert "lease expired" in effect["provider_receipt"]
    with api.client() as client:
        assert client.get(f"/api/runs/{run_id}/verify").json()["intact"] is True
