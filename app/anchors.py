"""Anchor operations the faces share: anchor runs' heads outside the database, and check the
anchor log and every anchored run against it."""

from __future__ import annotations

from typing import Any

from models.anchor import AUDIT_LOG_ID, Anchor, check_head
from models.chain import VerificationProblem
from models.errors import ConfigurationError, InvalidInputError
from stores.bundle import Stores
from stores.sql.privacy_records import SqlPrivacyRecords

__all__ = ["verify_anchors", "write_anchors"]


def _log(stores: Stores) -> Any:
    if stores.anchors is None:
        raise ConfigurationError(
            f"the artifact store {stores.artifacts.location} has no place for an anchor log"
        )
    return stores.anchors


async def write_anchors(
    stores: Stores, run_id: str | None = None, *, all_runs: bool = False
) -> list[dict[str, Any]]:
    """Anchor one run's head, or every run's (``all_runs``)."""
    _log(stores)
    if (run_id is None) == (not all_runs):
        raise InvalidInputError("name a run with --run or anchor every run with --all")
    run_ids = (
        [run_id]
        if run_id is not None
        else [r.run_id for r in await stores.ledger.list_runs(limit=10**9)]
    )
    written = []
    if all_runs:
        written += await _anchor_audit(stores)
    for rid in run_ids:
        entry = await stores.ledger.anchor(rid)
        if entry is not None:
            written.append(
                {
                    "run_id": rid,
                    "index": entry.index,
                    "sequence": entry.anchor.sequence,
                    "head": entry.anchor.head,
                    "hash": entry.hash,
                }
            )
    return written


async def verify_anchors(stores: Stores) -> dict[str, Any]:
    """The anchor log's own chain, then every anchored run: still in the database, and its
    chain still holding the latest anchored head."""
    log = _log(stores)
    entries, problems = await log.verify()
    latest: dict[str, Any] = {}
    for entry in entries:
        if entry.anchor.kind == "run":
            latest[entry.anchor.run_id] = entry.anchor
    recorded = {r.run_id for r in await stores.ledger.list_runs(limit=10**9)}
    missing = sorted(set(latest) - recorded)
    for run_id in missing:
        anchor = latest[run_id]
        problems.append(
            VerificationProblem(
                sequence=anchor.sequence,
                kind="anchor",
                message=f"run {run_id} is anchored at sequence {anchor.sequence} (head "
                f"{anchor.head}) but missing from the database",
            )
        )
    for run_id in sorted(set(latest) & recorded):
        hashes = [e.hash for e in await stores.ledger.events(run_id)]
        problem = check_head(latest[run_id], hashes, what=f"run {run_id}: anchor")
        if problem is not None:
            problems.append(problem)
    # the audit log of raw reads: its own chain, and its head against its latest anchor
    audits, audit_hashes, audit_problems = await SqlPrivacyRecords(stores.db).verify_audit()
    problems += audit_problems
    audit_anchor = next((e.anchor for e in reversed(entries) if e.anchor.kind == "audit"), None)
    if audit_anchor is not None:
        problem = check_head(audit_anchor, audit_hashes, what="audit log: anchor")
        if problem is not None:
            problems.append(problem)
    return {
        "location": log.location,
        "intact": not problems,
        "entries": len(entries),
        "runs": len(latest),
        "missing_runs": missing,
        "audit_records": audits,
        "problems": [p.model_dump(mode="json") for p in problems],
    }


async def _anchor_audit(stores: Stores) -> list[dict[str, Any]]:
    """Anchor the audit chain's head (when it verifies and has records)."""
    count, hashes, problems = await SqlPrivacyRecords(stores.db).verify_audit()
    if problems or not count:
        return []
    entry = await _log(stores).append(
        Anchor(
            kind="audit",
            run_id=AUDIT_LOG_ID,
            sequence=count,
            head=hashes[-1],
            at=stores.ledger.clock(),
        )
    )
    return [
        {
            "run_id": AUDIT_LOG_ID,
            "index": entry.index,
            "sequence": count,
            "head": hashes[-1],
            "hash": entry.hash,
        }
    ]
