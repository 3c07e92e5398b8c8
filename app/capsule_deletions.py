"""The deletions a capsule carries (``audit/deletions.json``): the chained audit records of
every destruction of its run's raw content (privacy ``delete-subject``, retention), each with
its place in the origin's audit chain (``position``, ``previous_hash``, ``hash``), signed with
the rest of the capsule.

A capsule's raw-payload rows say which raw forms were destroyed and by which request; these
records say which destructions happened. The ``deletions`` check (after ``entries``, before
``chain``) reads one against the other as ``runs verify`` does at home
(``models.privacy.raw_row_problems``): a destroyed row whose record is missing, a record that
does not recompute to its link, names another run, or claims more or fewer rows than the
capsule shows destroyed — a deletion removed from or invented in the capsule — is refused by
name. A record proves itself by its link and the capsule's signature; its place in the
origin's whole audit chain is checked at the origin (``anchors verify``), not here."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from models.anchor import audit_link
from models.errors import CapsuleRefusedError
from models.privacy import RawDeletion, RawRowState, raw_deletion, raw_row_problems

#: the entry a capsule's deletion records are carried in
DELETIONS_ENTRY = "audit/deletions.json"
_RAW_ROWS_ENTRY = "rows/raw_payloads.json"
_FIELDS = ("audit_id", "record", "position", "previous_hash", "hash")


def carried_deletions(entries: Mapping[str, bytes]) -> list[dict[str, Any]]:
    """The deletion records the capsule carries (none in a capsule made before they were)."""
    data = entries.get(DELETIONS_ENTRY)
    if data is None:
        return []
    try:
        carried = json.loads(data)
    except ValueError as exc:
        raise CapsuleRefusedError("deletions", f"{DELETIONS_ENTRY} is not JSON: {exc}") from None
    if not isinstance(carried, list) or not all(
        isinstance(d, dict) and all(f in d for f in _FIELDS) for d in carried
    ):
        raise CapsuleRefusedError(
            "deletions", f"{DELETIONS_ENTRY} is not a list of chained audit records"
        )
    return carried


def deletion_problems(
    run_id: str, raw_rows: Sequence[Mapping[str, Any]], carried: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Every way the capsule's destroyed raw rows of ``run_id`` and its carried deletion
    records disagree (module docstring)."""
    problems: list[str] = []
    deletions: list[tuple[RawDeletion, datetime]] = []
    for d in carried:
        name = f"deletion record {d['audit_id']}"
        body = d["record"]
        found = raw_deletion(body) if isinstance(body, dict) else None
        if found is None:
            problems.append(f"{name} is not a chained deletion of raw content")
        elif not _links(d):
            problems.append(
                f"{name} does not hash to its audit-chain link {d['hash']} (forged deletion)"
            )
        elif found[0].run_id != run_id or body.get("run_id") != run_id:
            problems.append(f"{name} destroys raw content of run {found[0].run_id}, not {run_id}")
        else:
            deletions.append(found)
    try:
        states = [_state(r) for r in raw_rows if r.get("run_id") == run_id and r.get("sequence")]
    except (TypeError, ValueError) as exc:
        return [*problems, f"a raw row of run {run_id} is not one: {exc}"]
    problems += [message for _, message in raw_row_problems(run_id, states, deletions, ())]
    claimed: dict[str, int] = {}
    for state in states:
        if state.destroyed_by_request is not None:
            claimed[state.destroyed_by_request] = claimed.get(state.destroyed_by_request, 0) + 1
    for deletion, _ in deletions:
        if deletion.event_payloads and not claimed.get(deletion.request_id):
            problems.append(
                f"deletion of run {run_id} by request {deletion.request_id} records "
                f"{deletion.event_payloads} raw payloads destroyed; no raw row of the capsule "
                "says it was (invented deletion)"
            )
    return problems


def check_deletions(run_id: str, entries: Mapping[str, bytes]) -> int:
    """The ``deletions`` check (``CapsuleRefusedError`` naming the first disagreement);
    returns how many deletion records the capsule carries."""
    carried = carried_deletions(entries)
    try:
        raw_rows = json.loads(entries.get(_RAW_ROWS_ENTRY, b"[]"))
    except ValueError as exc:
        raise CapsuleRefusedError("deletions", f"{_RAW_ROWS_ENTRY} is not JSON: {exc}") from None
    if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
        raise CapsuleRefusedError("deletions", f"{_RAW_ROWS_ENTRY} is not a list of rows")
    problems = deletion_problems(run_id, raw_rows, carried)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CapsuleRefusedError("deletions", problems[0] + more)
    return len(carried)


def _links(carried: Mapping[str, Any]) -> bool:
    try:
        return (
            audit_link(carried["previous_hash"], carried["position"], carried["record"])
            == (carried["hash"])
        )
    except (TypeError, ValueError):
        return False


def _state(row: Mapping[str, Any]) -> RawRowState:
    """A capsule's raw row (``stores.sql.capsule_rows`` encoding) as the checks read it."""
    destroyed_at = row.get("destroyed_at")
    return RawRowState(
        sequence=int(row["sequence"]),
        redacted=row.get("raw_hash") != row.get("sanitized_hash"),
        has_ciphertext=row.get("key_id") is not None
        and bool(row.get("ciphertext") or row.get("ciphertext_ref")),
        destroyed_at=datetime.fromisoformat(destroyed_at) if destroyed_at else None,
        destroyed_by_request=row.get("destroyed_by_request"),
    )
