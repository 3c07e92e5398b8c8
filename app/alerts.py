"""Alert intake: Prometheus Alertmanager webhook notifications open, or attach to, incidents.

Each firing alert is handled once per fingerprint: its labels name a run (``run_id``) or a
failure signature (``signature``). A run opens the incident ``INC-alert-<fingerprint>`` (the
fingerprint makes a re-delivered notification find the incident it opened, not open another);
a signature attaches to the newest incident already signed with it. Resolved alerts and alerts
naming neither are acknowledged and ignored, each with the reason."""

from __future__ import annotations

import re
from typing import Any

from app.incidents import incident_handle, new_incident_request, open_incident
from app.replays import ClientSource
from models.errors import ConflictError, NotFoundError, RunNotFoundError
from stores.bundle import Stores

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def alert_incident_id(fingerprint: str) -> str:
    """The incident an alert opens: stable per fingerprint (ids keep to a safe alphabet)."""
    return f"INC-alert-{_SAFE.sub('-', fingerprint)[:64]}"


async def take_alerts(
    client: ClientSource, stores: Stores, alerts: list[dict[str, Any]], *, repeat: int = 20
) -> list[dict[str, Any]]:
    """One answer per alert: ``action`` ``opened``, ``attached`` or ``ignored`` with the
    ``incident_id`` (or the ``reason`` it was ignored). Idempotent by fingerprint."""
    return [await _take(client, stores, alert, repeat) for alert in alerts]


async def _take(
    client: ClientSource, stores: Stores, alert: dict[str, Any], repeat: int
) -> dict[str, Any]:
    from stores.sql.incidents import SqlIncidentStore

    fingerprint = str(alert.get("fingerprint") or "")
    labels = alert.get("labels") or {}
    answer: dict[str, Any] = {"fingerprint": fingerprint, "alertname": labels.get("alertname")}
    if alert.get("status", "firing") != "firing":
        return answer | {"action": "ignored", "reason": "the alert is resolved"}
    run_id, signature = labels.get("run_id"), labels.get("signature")
    if run_id:
        incident_id = alert_incident_id(fingerprint)
        try:
            await incident_handle(await client(), incident_id)
            return answer | {"action": "attached", "incident_id": incident_id}
        except NotFoundError:
            pass
        request = new_incident_request(str(run_id), [], incident_id=incident_id, repeat=repeat)
        try:
            await open_incident(client, stores, request)
        except ConflictError:  # a concurrent delivery of the same alert opened it first
            return answer | {"action": "attached", "incident_id": incident_id}
        except RunNotFoundError:
            return answer | {"action": "ignored", "reason": f"run {run_id!r} is not recorded"}
        return answer | {"action": "opened", "incident_id": incident_id}
    if signature:
        found = await SqlIncidentStore(stores.db).list_incidents(signature=str(signature), limit=1)
        if not found:
            reason = f"no incident is signed {signature!r} and the alert names no run_id"
            return answer | {"action": "ignored", "reason": reason}
        return answer | {"action": "attached", "incident_id": found[0].incident_id}
    return answer | {"action": "ignored", "reason": "its labels name no run_id and no signature"}
