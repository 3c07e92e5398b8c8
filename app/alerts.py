"""Alert intake: Prometheus Alertmanager webhook notifications open, or attach to, incidents.

Each firing alert's fingerprint is taken into one incident for ever (``alert_fingerprints``):
its labels name a run (``run_id``: it opens the incident ``INC-alert-<fingerprint>``) or a
failure signature (``signature``: it attaches to the newest incident signed so). A later
delivery of the same fingerprint — a re-delivered notification, or the alert firing again —
finds its row, is counted there, and opens or attaches nothing (``duplicate``). The alerts
taken into an incident are shown with it (``incident_alerts``). Resolved alerts and alerts
naming neither are acknowledged and ignored, each with the reason."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from app.incidents import new_incident_request, open_incident
from app.replays import ClientSource
from models.errors import ConflictError, RunNotFoundError
from stores.bundle import Stores

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def alert_incident_id(fingerprint: str) -> str:
    """The incident an alert opens: stable per fingerprint (ids keep to a safe alphabet)."""
    return f"INC-alert-{_SAFE.sub('-', fingerprint)[:64]}"


async def take_alerts(
    client: ClientSource, stores: Stores, alerts: list[dict[str, Any]], *, repeat: int = 20
) -> list[dict[str, Any]]:
    """One answer per alert: ``action`` ``opened``, ``attached``, ``duplicate`` (the
    fingerprint was taken before: ``incident_id`` and ``deliveries`` say where and how often)
    or ``ignored`` (with the ``reason``)."""
    return [await _take(client, stores, alert, repeat) for alert in alerts]


async def incident_alerts(stores: Stores, incident_id: str) -> list[dict[str, Any]]:
    """The alerts taken into ``incident_id`` (opened it or attached to it), with their
    deliveries: what ``incident status`` and ``GET /api/incidents/{id}`` show."""
    return await stores.alert_fingerprints.for_incident(incident_id)


async def _take(
    client: ClientSource, stores: Stores, alert: dict[str, Any], repeat: int
) -> dict[str, Any]:
    fingerprint = str(alert.get("fingerprint") or "")
    labels = alert.get("labels") or {}
    answer: dict[str, Any] = {"fingerprint": fingerprint, "alertname": labels.get("alertname")}
    if alert.get("status", "firing") != "firing":
        return answer | {"action": "ignored", "reason": "the alert is resolved"}
    if not fingerprint:
        return answer | {"action": "ignored", "reason": "the alert has no fingerprint"}
    fingerprints = stores.alert_fingerprints
    now = datetime.now(UTC)
    if (seen := await fingerprints.taken(fingerprint, now)) is not None:
        return answer | _duplicate(seen)
    run_id, signature = labels.get("run_id"), labels.get("signature")
    if run_id:
        action, incident_id, why = await _open_for_run(
            client, stores, fingerprint, str(run_id), repeat
        )
        matched = ("run_id", str(run_id))
    elif signature:
        action, incident_id, why = await _attach_to_signed(stores, str(signature))
        matched = ("signature", str(signature))
    else:
        return answer | {
            "action": "ignored",
            "reason": "its labels name no run_id and no signature",
        }
    if incident_id is None:
        return answer | {"action": "ignored", "reason": why}
    row = await fingerprints.claim(
        fingerprint,
        incident_id,
        action=action,
        alertname=labels.get("alertname"),
        matched_by=matched[0],
        matched_value=matched[1],
        at=now,
    )
    if row["incident_id"] != incident_id or row["deliveries"] > 1:  # a concurrent delivery won
        return answer | _duplicate(row)
    return answer | {"action": action, "incident_id": incident_id}


def _duplicate(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "action": "duplicate",
        "incident_id": row["incident_id"],
        "first_action": row["action"],
        "deliveries": row["deliveries"],
    }


async def _open_for_run(
    client: ClientSource, stores: Stores, fingerprint: str, run_id: str, repeat: int
) -> tuple[str, str | None, str]:
    incident_id = alert_incident_id(fingerprint)
    request = new_incident_request(run_id, [], incident_id=incident_id, repeat=repeat)
    try:
        await open_incident(client, stores, request)
    except ConflictError:  # opened before this fingerprint was recorded (a crash between)
        return "attached", incident_id, ""
    except RunNotFoundError:
        return "ignored", None, f"run {run_id!r} is not recorded"
    return "opened", incident_id, ""


async def _attach_to_signed(stores: Stores, signature: str) -> tuple[str, str | None, str]:
    found = await stores.incidents.list_incidents(signature=signature, limit=1)
    if not found:
        return "ignored", None, f"no incident is signed {signature!r} and the alert names no run_id"
    return "attached", found[0].incident_id, ""
