"""The recurrence watch (canary) after an incident's report: does the failure come back in new
runs that carry the fix? (pure)

A run *carries the fix version* V when V is its graph version, one of its pinned versions or
label values, or the version of a prompt bundle it compiled (a prompt artifact
``V/<template>``). A run *recurs* when it carries the fix and either the failure's signature
comes back (any signature but the fallback ``MODEL_DECISION_UNEXPLAINED``, which says nothing)
or the incident's regression case fails on it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from models.base import Instant, Record
from models.execution import RunRecord

FALLBACK_SIGNATURE = "MODEL_DECISION_UNEXPLAINED"


class WatchCounts(Record):
    """What ``incident status`` shows as ``watch``."""

    runs_with_fix: int = 0
    recurrences: int = 0
    #: runs of the graph judged so far (with or without the fix)
    runs_seen: int = 0
    #: the newest run creation time judged, and the runs judged at exactly that time
    cursor: Instant | None = None
    seen_at_cursor: tuple[str, ...] = ()
    started_at: Instant | None = None
    #: the new incident opened when the signature recurred on the fix version
    reopened_incident_id: str | None = None
    recurred_run_ids: tuple[str, ...] = Field(default_factory=tuple)


class WatchedRun(Record):
    run_id: str
    created_at: Instant
    carries_fix: bool
    recurred: bool
    why: str = ""


def carries_fix(run: RunRecord, fix_version: str, prompt_versions: Iterable[str] = ()) -> bool:
    """Whether ``run`` runs the fix version (see the module doc)."""
    pinned = run.pinned.model_dump().values()
    versions = {run.graph_version, *(str(v) for v in pinned if v), *run.labels.values()}
    bundles = {v.split("/", 1)[0] for v in prompt_versions}
    return fix_version in versions or fix_version in bundles


def recurred(signature: str, incident_signature: str, case_failed: bool) -> bool:
    """Whether a run that carries the fix shows the failure again."""
    same = signature == incident_signature and signature != FALLBACK_SIGNATURE
    return same or case_failed


def advance(counts: WatchCounts, runs: Iterable[WatchedRun]) -> WatchCounts:
    """``counts`` after judging ``runs`` (new, oldest first)."""
    runs = list(runs)
    if not runs:
        return counts
    cursor = max(r.created_at for r in runs)
    if counts.cursor is not None and cursor < counts.cursor:
        cursor = counts.cursor
    at_cursor = [r.run_id for r in runs if r.created_at == cursor]
    if counts.cursor == cursor:
        at_cursor = [*counts.seen_at_cursor, *at_cursor]
    return counts.model_copy(
        update={
            "runs_seen": counts.runs_seen + len(runs),
            "runs_with_fix": counts.runs_with_fix + sum(r.carries_fix for r in runs),
            "recurrences": counts.recurrences + sum(r.recurred for r in runs),
            "recurred_run_ids": (
                *counts.recurred_run_ids,
                *(r.run_id for r in runs if r.recurred),
            ),
            "cursor": cursor,
            "seen_at_cursor": tuple(at_cursor),
        }
    )
