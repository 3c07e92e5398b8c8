"""Anchor operations the faces share: anchor runs' heads outside the database, and check the
anchor log and every anchored run against it."""

from __future__ import annotations

from typing import Any

from models.anchor import check_head
from models.chain import VerificationProblem
from models.errors import ConfigurationError, InvalidInputError
from stores.bundle import Stores

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
    return {
        "location": log.location,
        "intact": not problems,
        "entries": len(entries),
        "runs": len(latest),
        "missing_runs": missing,
        "problems": [p.model_dump(mode="json") for p in problems],
    }
