"""Read-side views of runs, shared by the CLI (``runs … --json``) and the HTTP API."""

from __future__ import annotations

from typing import Any

from models.chain import BreakReason, ChainVerification
from models.duplicates import duplicate_side_effects
from models.evidence import SideEffectRecord
from models.ingest import is_ingested
from runtime.completeness import evidence_completeness
from stores.bundle import Stores
from stores.sql.views import run_labels

#: what a run is: recorded live by an agent, imported from another system, a replay, or a
#: replay the regression gate ran
RUN_KINDS = ("source", "imported", "replay", "regress")
#: the kinds ``runs list`` shows unless asked otherwise: the runs incidents are about
DEFAULT_RUN_KINDS = ("source", "imported")


def run_kind(run_id: str, graph_id: str, labels: dict[str, str]) -> str:
    """The kind of a run, from the labels its recorder gave it."""
    if labels.get("kind") == "replay":
        return "regress" if run_id.startswith("regress-") else "replay"
    if is_ingested(graph_id, labels):
        return "imported"
    return "source"


async def list_runs_view(
    stores: Stores, limit: int = 1000, kinds: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """The recorded runs' headers and chain heads, newest first, with their kind; only the
    ``kinds`` asked for (``None``: every kind)."""
    runs = await stores.ledger.list_runs(limit=limit)
    labels = await run_labels(stores.db, [r.run_id for r in runs])
    rows = [
        {
            "run_id": r.run_id,
            "kind": run_kind(r.run_id, r.graph_id, labels.get(r.run_id, {})),
            "graph_id": r.graph_id,
            "graph_version": r.graph_version,
            "status": r.status,
            "created_at": r.created_at.isoformat(),
            "event_count": r.event_count,
            "head_hash": r.head_hash,
        }
        for r in runs
    ]
    return [row for row in rows if kinds is None or row["kind"] in kinds]


async def describe_run(stores: Stores, run_id: str) -> dict[str, Any]:
    """A run's header, pins, chain head, events and the evidence recorded beside them, with
    ``integrity``: whether the run verifies (a header that is not the chained one, or a status
    or outcome the terminal event does not say, is shown flagged, never as if it were)."""
    run = await stores.ledger.get_run(run_id)
    verification = await stores.ledger.verify(run_id)
    events = await stores.ledger.events(run_id)
    evidence = await stores.run_views.run_evidence(run_id)
    completeness = await evidence_completeness(
        stores.ledger, stores.evidence, stores.artifacts, run_id
    )
    return {
        **run.model_dump(mode="json"),
        "event_count": len(events),
        "head_hash": events[-1].hash if events else None,
        "events": [e.model_dump(mode="json") for e in events],
        "fixtures": evidence["tool_fixtures"],
        "prompt_artifacts": evidence["prompt_artifacts"],
        "context_snapshots": evidence["context_snapshots"],
        "retrievals": evidence["retrieval_fixtures"],
        "policy_decisions": evidence["policy_decisions"],
        "approvals": evidence["approvals"],
        "side_effects": evidence["side_effects"],
        # writes applied twice with the same action hash (critical; models.duplicates)
        "duplicates": [
            {"action_hash": d.action_hash, "side_effect_ids": list(d.side_effect_ids)}
            for d in duplicate_side_effects(await stores.evidence.records(SideEffectRecord, run_id))
        ],
        "checkpoints": evidence["checkpoints"],
        # the run's data subjects (rule 17): end user and tenant, primary first
        "subjects": await stores.privacy.vault.subjects(run_id) if stores.privacy else [],
        "integrity": integrity_view(verification),
        "evidence_completeness": {
            **completeness.model_dump(mode="json"),
            "confidence": completeness.confidence.value,
            "summary": completeness.summary(),
        },
    }


def integrity_view(verification: ChainVerification) -> dict[str, Any]:
    """What ``runs show`` says of a run's integrity: intact or the first problem, whether its
    header is chained, and whether the header shown is vouched for by the chain."""
    report = verification.report()
    header_problems = [p for p in report["problems"] if p["kind"] in ("header", "chain")]
    return {
        "intact": verification.intact,
        "summary": verification.summary(),
        "header": report["header"],
        "header_verified": verification.intact
        or (not header_problems and verification.reason is not BreakReason.HEADER),
        "problems": report["problems"],
    }
