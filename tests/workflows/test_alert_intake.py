"""Alert intake (app.alerts, behind POST /api/alerts): Alertmanager alerts open or attach to
incidents idempotently by fingerprint, on a real Temporal dev server with real workers."""

from __future__ import annotations

import asyncio
import time
import uuid

from app.alerts import alert_incident_id, take_alerts
from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentView


def alert(fingerprint: str, status: str = "firing", **labels: str) -> dict:
    return {
        "status": status,
        "labels": {"alertname": "AgentRefundUnknown", **labels},
        "annotations": {},
        "fingerprint": fingerprint,
    }


async def test_alerts_open_once_per_fingerprint_and_attach_by_signature(replay_stack) -> None:  # type: ignore[no-untyped-def]
    stack = replay_stack
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=2
    )

    async def client():  # type: ignore[no-untyped-def]
        return stack.client

    fp = uuid.uuid4().hex[:16]
    first = await take_alerts(client, stack.stores, [alert(fp, run_id=run.run_id)], repeat=1)
    assert first[0]["action"] == "opened"
    incident_id = first[0]["incident_id"]
    assert incident_id == alert_incident_id(fp)
    again = await take_alerts(client, stack.stores, [alert(fp, run_id=run.run_id)], repeat=1)
    assert again[0] | {} == first[0] | {"action": "attached"}
    view = await stack.client.get_workflow_handle(incident_id).query(
        "status", result_type=IncidentView
    )
    assert view is not None and view.source_run_id == run.run_id

    others = await take_alerts(
        client,
        stack.stores,
        [
            alert("r1", status="resolved", run_id=run.run_id),
            alert("n1"),
            alert("m1", run_id="run-nope"),
            alert("s1", signature="NO_SUCH_SIGNATURE"),
        ],
    )
    assert [o["action"] for o in others] == ["ignored"] * 4
    assert "resolved" in others[0]["reason"] and "no run_id" in others[1]["reason"]
    assert "not recorded" in others[2]["reason"] and "NO_SUCH_SIGNATURE" in others[3]["reason"]
    # once signed, an alert naming its signature attaches to the newest incident signed so
    deadline = time.monotonic() + 120
    while (view is None or view.signature is None) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        view = await stack.client.get_workflow_handle(incident_id).query(
            "status", result_type=IncidentView
        )
    assert view is not None and view.signature is not None
    signature = view.signature.signature
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        (attached,) = await take_alerts(client, stack.stores, [alert("s2", signature=signature)])
        if attached["action"] == "attached":
            break
        await asyncio.sleep(0.2)  # the signed view reaches the store through an activity
    assert attached["action"] == "attached" and attached["incident_id"].startswith("INC-")
    await stack.client.get_workflow_handle(incident_id).terminate("test done")
