"""Alert intake (app.alerts, behind POST /api/alerts): Alertmanager alerts open or attach to
incidents idempotently by fingerprint, on a real Temporal dev server with real workers."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from app.alerts import alert_incident_id, incident_alerts, take_alerts
from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentRequest, IncidentView
from stores.sql.incidents import SqlIncidentStore


def alert(fingerprint: str, status: str = "firing", **labels: str) -> dict:
    return {
        "status": status,
        "labels": {"alertname": "AgentRefundUnknown", **labels},
        "annotations": {},
        "fingerprint": fingerprint,
    }


async def test_alerts_open_once_per_fingerprint_and_attach_by_signature(replay_stack) -> None:
    stack = replay_stack
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=2
    )

    async def client():
        return stack.client

    fp = uuid.uuid4().hex[:16]
    first = await take_alerts(client, stack.stores, [alert(fp, run_id=run.run_id)], repeat=1)
    assert first[0]["action"] == "opened"
    incident_id = first[0]["incident_id"]
    assert incident_id == alert_incident_id(fp)
    again = await take_alerts(client, stack.stores, [alert(fp, run_id=run.run_id)], repeat=1)
    # a re-delivery opens nothing and attaches nothing: it is counted on the fingerprint
    assert again[0] == first[0] | {"action": "duplicate", "first_action": "opened", "deliveries": 2}
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
    assert attached["action"] == "attached" and attached["incident_id"] == incident_id
    # a newer incident signed the same: the fingerprint stays with the incident it was taken
    # into (a re-delivery must not attach it to a second incident)
    await SqlIncidentStore(stack.stores.db).save_incident(
        f"INC-newer-{fp}", run.run_id, None, signature, signature, "COMPLETED", {}
    )
    (redelivered,) = await take_alerts(client, stack.stores, [alert("s2", signature=signature)])
    assert redelivered["action"] == "duplicate" and redelivered["incident_id"] == incident_id
    assert redelivered["deliveries"] == 2
    # both alerts are visible on the incident
    shown = {a["fingerprint"]: a for a in await incident_alerts(stack.stores, incident_id)}
    assert shown[fp]["action"] == "opened" and shown[fp]["matched_by"] == "run_id"
    assert shown["s2"]["action"] == "attached" and shown["s2"]["matched_value"] == signature
    assert shown["s2"]["deliveries"] == 2
    assert await incident_alerts(stack.stores, f"INC-newer-{fp}") == []
    await stack.client.get_workflow_handle(incident_id).terminate("test done")


async def test_post_watches_opens_an_incident_with_its_recurrence_watch(replay_stack) -> None:
    stack = replay_stack
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=4
    )
    app = create_app(stack.settings, ApiConfig(tokens={"eng": frozenset({Role.ENGINEER})}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api", headers={"Authorization": "Bearer eng"}
    ) as http:
        answer = await http.post(
            "/api/watches", json={"sourceRunId": run.run_id, "cleanRuns": 3, "days": 2}
        )
        refused = await http.post("/api/watches", json={"sourceRunId": run.run_id, "cleanRuns": 0})
    await app.state.api.close()
    assert answer.status_code == 202, answer.text
    assert refused.status_code == 422 and "cleanRuns" in refused.text
    body = answer.json()
    assert body["watch"] == {"cleanRuns": 3, "days": 2.0}
    handle = stack.client.get_workflow_handle(body["incidentId"])
    async for event in handle.fetch_history_events():
        started = event.workflow_execution_started_event_attributes
        [request] = await stack.client.data_converter.decode(
            list(started.input.payloads), [IncidentRequest]
        )
        break
    assert request.watch_clean_runs == 3 and request.watch_days == 2.0
    assert request.source_run_id == run.run_id
    await handle.terminate("test done")
