"""Anchor operations the faces share: anchor runs' heads outside the database, check the anchor
log and every anchored run against it, check a copy of the log offline, and say how a run's
verification used the anchors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from models.anchor import AUDIT_LOG_ID, Anchor, AnchorEntry, check_head, unsigned_prefix
from models.chain import ChainVerification, VerificationProblem
from models.errors import ConfigurationError, InvalidInputError
from stores.anchor_signing import AnchorKeys, load_anchor_keys
from stores.anchors import AnchorLog, S3Access, anchor_log_at
from stores.bundle import Stores
from stores.case_signing import load_public_key, public_pem
from stores.config import StoreSettings

__all__ = [
    "NO_ANCHORS",
    "anchor_public_pem",
    "anchor_use",
    "verify_anchor_copy",
    "verify_anchors",
    "write_anchors",
]

#: what a verification says when there is no anchor log
NO_ANCHORS = (
    "no anchor location configured (REPLAYBOOK_ANCHORS=off): anchors not checked, a re-chained "
    "or truncated run is not detected"
)


def _log(stores: Stores) -> AnchorLog:
    if stores.anchors is None:
        raise ConfigurationError(NO_ANCHORS, field="REPLAYBOOK_ANCHORS")
    return stores.anchors


def anchor_use(stores: Stores, verification: ChainVerification) -> dict[str, Any]:
    """How ``runs verify`` used the anchors: where, with which key, and whether the run's
    anchor was signed (``note`` is the sentence the CLI prints)."""
    log = stores.anchors
    if log is None:
        return {"location": None, "checked": False, "note": NO_ANCHORS}
    checked = verification.checked.get("anchors", 0) > 0
    unsigned = verification.checked.get("unsigned_anchors", 0) > 0
    key = log.key_id
    if not checked:
        note = f"no anchor of this run in {log.location}"
    elif unsigned:
        note = (
            "checked against an unsigned anchor (the log an earlier version wrote beside the "
            "artifacts): it resists no one who can write the artifact store"
        )
    else:
        note = f"checked against the signed anchor log {log.location} (key {key})"
    return {
        "location": log.location,
        "key_id": key,
        "checked": checked,
        "signed": checked and not unsigned,
        "note": note,
    }


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


async def verify_anchors(stores: Stores, *, min_length: int | None = None) -> dict[str, Any]:
    """The anchor log's own chain, then every anchored run: still in the database, and its
    chain still holding the latest anchored head."""
    log = _log(stores)
    view = await _log_view(log, min_length)
    entries: list[AnchorEntry] = view.pop("_entries")
    problems: list[VerificationProblem] = view.pop("_problems")
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
    audits, audit_hashes, audit_problems = await stores.privacy_records.verify_audit()
    problems += audit_problems
    audit_anchor = next((e.anchor for e in reversed(entries) if e.anchor.kind == "audit"), None)
    if audit_anchor is not None:
        problem = check_head(audit_anchor, audit_hashes, what="audit log: anchor")
        if problem is not None:
            problems.append(problem)
    return view | {
        "intact": not problems,
        "runs": len(latest),
        "missing_runs": missing,
        "audit_records": audits,
        "problems": [p.model_dump(mode="json") for p in problems],
    }


async def _anchor_audit(stores: Stores) -> list[dict[str, Any]]:
    """Anchor the audit chain's head (when it verifies and has records)."""
    count, hashes, problems = await stores.privacy_records.verify_audit()
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


async def _log_view(log: AnchorLog, min_length: int | None = None) -> dict[str, Any]:
    """The log's own check (chain, signatures, the runs' copies, at least ``min_length``
    entries: a length noted earlier) and that of the unsigned log an earlier version wrote
    beside the artifacts, when there is one."""
    entries, problems = await log.verify()
    if min_length is not None and len(entries) < min_length:
        problems.append(
            VerificationProblem(
                sequence=None,
                kind="anchor",
                message=f"the anchor log {log.location} has {len(entries)} entries, fewer than "
                f"the {min_length} expected: its newest entries were deleted",
            )
        )
    view: dict[str, Any] = {
        "location": log.location,
        "key_id": log.key_id,
        "entries": len(entries),
        "length": len(entries),
        "head": entries[-1].hash if entries else None,
        "unsigned": unsigned_prefix(entries),
        "legacy": None,
    }
    if log.legacy is not None:
        old, old_problems = await log.legacy.verify()
        if old:
            view["legacy"] = {
                "location": log.legacy.location,
                "entries": len(old),
                "signed": False,
                "intact": not old_problems,
            }
            problems += [
                p.model_copy(update={"message": f"legacy log {log.legacy.location}: {p.message}"})
                for p in old_problems
            ]
    view["problems"] = [p.model_dump(mode="json") for p in problems]
    view["intact"] = not problems
    return view | {"_entries": entries, "_problems": problems}


async def verify_anchor_copy(
    location: str,
    public_key: Path,
    settings: StoreSettings | None = None,
    min_length: int | None = None,
) -> dict[str, Any]:
    """Check a copy of an anchor log offline (no database, no stack): its chain, every entry's
    signature under ``public_key``, the runs' copies against the log. An ``s3://`` copy is read
    with the endpoint and credentials of ``settings``' artifact store."""
    keys = AnchorKeys.checking(load_public_key(public_key))
    s3 = None
    if settings is not None:
        a = settings.artifacts
        secret = a.s3_secret_key.get_secret_value() if a.s3_secret_key is not None else None
        s3 = S3Access(a.s3_endpoint_url, a.s3_access_key, secret)
    local = "://" not in location
    if local and not await asyncio.to_thread(lambda: Path(location).expanduser().is_dir()):
        raise ConfigurationError(f"anchor log {location}: no such directory", field="location")
    view = await _log_view(anchor_log_at(location, keys, s3=s3), min_length)
    view.pop("_entries")
    view.pop("_problems")
    return view


def anchor_public_pem(settings: StoreSettings) -> bytes:
    """The PEM public key that checks the anchors of the installation ``settings`` describe."""
    return public_pem(load_anchor_keys(settings.anchors, settings.home).trusted)
