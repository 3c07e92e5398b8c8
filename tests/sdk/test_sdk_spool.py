"""The API stopped in the middle of a recorded run: the agent finishes unharmed, what the server
did not take stays in the spool, and after the API is back ``replaybook-sdk flush`` sends it:
every event recorded once (a second resend of the whole run records nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.sdk.servers import ROOT, TOKEN, ApiProcess, ChatServer, poll
from tests.sdk.test_sdk_write_ahead import SDK_CLI

#: the ledger events of the refund agent's run (header, 3 model calls, 2 tools, the end), as
#: an uninterrupted run records them
RUN_EVENTS = 26


def _flush(api: ApiProcess, spool: Path) -> dict[str, Any]:
    done = subprocess.run(
        [SDK_CLI, "--url", api.url, "--token", TOKEN, "--spool-dir", str(spool), "--json", "flush"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_the_api_stopped_mid_run_loses_and_duplicates_nothing(
    api: ApiProcess, tmp_path: Path
) -> None:
    spool, copy = tmp_path / "spool", tmp_path / "copy"
    run_id = "spooled-refund-1"
    client = api.client()

    def has_run() -> bool:
        return client.get(f"/api/runs/{run_id}").status_code == 200

    def stop_api_at_the_second_call(number: int) -> None:
        if number == 2:  # the run has started on the server; then the server goes away
            poll(has_run, "the run's first events to reach the server", 30)
            api.stop()

    env = {
        **os.environ,
        "REPLAYBOOK_URL": api.url,
        "REPLAYBOOK_TOKEN": TOKEN,
        "REPLAYBOOK_SPOOL_DIR": str(spool),
        "PYTHONPATH": str(ROOT),
    }
    with ChatServer() as chat:
        chat.on_request(stop_api_at_the_second_call)
        agent = subprocess.run(
            [sys.executable, "tests/sdk/refund_agent.py", chat.base_url, "--run-id", run_id],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert agent.returncode == 0, agent.stderr  # the agent finished as if nothing happened
    assert json.loads(agent.stdout) == {"run_id": run_id}
    (spooled,) = spool.glob("*.jsonl")  # what the server did not take is on disk
    copy.mkdir()
    shutil.copy(spooled, copy)  # the whole run, for a second resend below
    api.start()
    partial = client.get(f"/api/runs/{run_id}").json()
    assert partial["status"] == "RUNNING" and partial["event_count"] < RUN_EVENTS
    sent = _flush(api, spool)
    assert (sent["runs"], sent["left"], sent["errors"]) == (1, 0, [])
    view = client.get(f"/api/runs/{run_id}").json()
    assert (view["status"], view["event_count"]) == ("COMPLETED", RUN_EVENTS)
    assert [e["sequence"] for e in view["events"]] == list(range(1, RUN_EVENTS + 1))
    # everything again, from the first event: accepted as duplicates, nothing recorded twice
    again = _flush(api, copy)
    assert again["events_sent"] > sent["events_sent"] and again["left"] == 0
    view = client.get(f"/api/runs/{run_id}").json()
    assert view["event_count"] == RUN_EVENTS
    assert [e["status"] for e in view["side_effects"]] == ["CONFIRMED"]
    assert len(view["fixtures"]) == 2
    assert client.get(f"/api/runs/{run_id}/verify").json()["intact"] is True
    client.close()
