"""What the web console (``api/ui``) shows, read from the stores: a keyset page of runs with
their per-row facts, and a run's evidence as a timeline. The console renders these; the
actions (replay, incident, confirmation) call the same operations as the CLI and the API
(``app.replays``, ``app.incidents``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from app.runs import RUN_KINDS, run_kind
from models.errors import InvalidInputError
from models.evidence import SideEffectRecord
from runtime.completeness import evidence_completeness
from stores.sql.run_pages import RunFilter, chain_heads, runs_after, side_effect_states

if TYPE_CHECKING:
    from stores.bundle import Stores

#: runs on one page of ``/ui/runs``
PAGE_SIZE = 25
#: the most runs one page reads while looking for runs of a kind (the kind is in the labels)
MAX_SCAN = 2000
#: the characters of a payload a timeline entry shows (the event page shows all of it)
PAYLOAD_PREVIEW = 400
#: the events whose timeline row shows the payload under the summary
PREVIEWED = frozenset(
    {
        "RUN_STARTED",
        "MODEL_CALL",
        "TOOL_CALL",
        "RETRIEVAL",
        "POLICY_DECISION",
        "APPROVAL",
        "SIDE_EFFECT",
        "ACTION_REFUSED",
        "WRITE_BLOCKED",
        "FIXTURE_MISS",
        "OPAQUE",
        "RUN_COMPLETED",
        "RUN_FAILED",
    }
)


def parse_cursor(text: str | None) -> tuple[datetime, str] | None:
    """``CREATED_AT~RUN_ID`` (the last row of the previous page) or ``None``."""
    if not text:
        return None
    at, sep, run_id = text.partition("~")
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        when = None
    if not sep or not run_id or when is None:
        raise InvalidInputError(f"after {text!r} is not a page position", field="after")
    return (when if when.tzinfo else when.replace(tzinfo=UTC)), run_id


def parse_day(text: str | None, field: str) -> datetime | None:
    """``YYYY-MM-DD`` (UTC midnight) or ``None``."""
    if not text:
        return None
    try:
        day = datetime.strptime(text, "%Y-%m-%d")
    except ValueError:
        raise InvalidInputError(
            f"{field} {text!r} is not a date (YYYY-MM-DD)", field=field
        ) from None
    return day.replace(tzinfo=UTC)


async def runs_page(
    stores: Stores,
    *,
    kind: str | None = None,
    graph: str | None = None,
    outcome: str | None = None,
    since: str | None = None,
    until: str | None = None,
    after: str | None = None,
    limit: int = PAGE_SIZE,
) -> dict[str, Any]:
    """One page of runs, newest first, with each row's outcome, chain head check and side
    effects by state; ``next``: the position of the page after it (None at the end)."""
    from datetime import timedelta

    if kind and kind not in RUN_KINDS:
        raise InvalidInputError(
            f"kind must be one of {', '.join(RUN_KINDS)}, not {kind!r}", field="kind"
        )
    end = parse_day(until, "until")
    where = RunFilter(
        graph_id=graph or None,
        status=outcome or None,
        since=parse_day(since, "since"),
        until=end + timedelta(days=1) if end else None,
    )
    position = parse_cursor(after)
    rows: list[Any] = []
    scanned = 0
    more = False
    while len(rows) < limit:
        batch = await runs_after(stores.db, where, position, limit if not kind else limit * 4)
        scanned += len(batch)
        for row in batch:
            position = (row.created_at, row.run_id)
            if not kind or run_kind(row.run_id, row.graph_id, row.labels) == kind:
                rows.append(row)
                if len(rows) == limit:
                    break
        more = len(batch) == (limit if not kind else limit * 4) or len(rows) == limit
        if not more or scanned >= MAX_SCAN:
            break
    ids = [r.run_id for r in rows]
    heads = await chain_heads(stores.db, ids)
    effects = await side_effect_states(stores.db, ids)
    out = []
    for r in rows:
        head = heads.get(r.run_id)
        if head is None:
            chain = "no events" if r.head_sequence == 0 else "events missing"
        elif head == (r.head_sequence, r.head_hash):
            chain = "head intact"
        else:
            chain = f"head differs (stored {head[0]}, header {r.head_sequence})"
        out.append(
            {
                "run_id": r.run_id,
                "kind": run_kind(r.run_id, r.graph_id, r.labels),
                "graph_id": r.graph_id,
                "graph_version": r.graph_version,
                "outcome": r.status,
                "created_at": r.created_at.isoformat(),
                "event_count": r.head_sequence,
                "chain": chain,
                "side_effects": effects.get(r.run_id, {}),
            }
        )
    cursor = f"{position[0].isoformat()}~{position[1]}" if more and position else None
    return {"runs": out, "next": cursor}


async def run_timeline(stores: Stores, run_id: str) -> dict[str, Any]:
    """A run's header, pins, completeness, side effects with their state history, and every
    event (sanitized payload, previewed) in sequence order."""
    run = await stores.ledger.get_run(run_id)
    loaded = await stores.ledger.events_with_payloads(run_id, missing_ok=True)
    recorded_effects = await stores.evidence.records(SideEffectRecord, run_id)
    completeness = await evidence_completeness(
        stores.ledger, stores.evidence, stores.artifacts, run_id, loaded
    )
    history: dict[str, list[dict[str, Any]]] = {}
    events = []
    for event, data in loaded:
        payload = orjson.loads(data) if data is not None else None
        if event.type == "SIDE_EFFECT" and isinstance(payload, dict):
            history.setdefault(str(payload.get("side_effect_id")), []).append(
                {"sequence": event.sequence, "status": payload.get("status")}
            )
        # the stored canonical JSON as it is (the event page shows it whole)
        text = "" if data is None else data[: PAYLOAD_PREVIEW + 1].decode(errors="replace")
        kind = str(event.type)
        events.append(
            {
                "sequence": event.sequence,
                "type": str(event.type),
                "step_id": event.step_id,
                "logical_time": event.logical_time.isoformat(),
                "summary": event_summary(str(event.type), payload),
                # the payload beside a summary that names only part of it (the others' one
                # line is the payload itself; the event's page shows every payload whole)
                "payload": text[:PAYLOAD_PREVIEW] if kind in PREVIEWED else "",
                "truncated": len(text) > PAYLOAD_PREVIEW,
                "missing": data is None,
                "hash": event.hash,
            }
        )
    effects = [
        {**e.model_dump(mode="json"), "history": history.get(e.side_effect_id, [])}
        for e in recorded_effects
    ]
    return {
        **run.model_dump(mode="json"),
        "events": events,
        "side_effects": effects,
        "completeness": {
            **completeness.model_dump(mode="json"),
            "confidence": completeness.confidence.value,
            "summary": completeness.summary(),
        },
    }


def _short(value: Any, size: int = 120) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= size else text[: size - 1] + "…"


def event_summary(kind: str, p: Any) -> str:
    """One line saying what an event recorded (its payload is shown beside it)."""
    if not isinstance(p, dict):
        return "" if p is None else _short(p)
    if kind == "MODEL_CALL":
        response = p.get("response") or {}
        calls = ", ".join(str(c.get("name")) for c in response.get("tool_calls") or [])
        said = calls or _short(response.get("content") or "", 80)
        usage = p.get("usage") or response.get("usage") or {}
        tokens = f" tokens {usage.get('total_tokens')}" if usage.get("total_tokens") else ""
        return f"{p.get('model_profile')} → {said or '(no answer)'}; cost {p.get('cost')}{tokens}"
    if kind == "TOOL_CALL":
        return f"{p.get('capability_id')} {_short(p.get('sanitized_request'), 80)} → {p.get('outcome')}"
    if kind == "RETRIEVAL":
        chunks = "; ".join(
            f"#{c.get('rank')} {c.get('chunk_id')} ({c.get('score')})"
            for c in p.get("evidence") or []
        )
        return f"{p.get('retriever_version')}: {chunks or 'no chunks'}"
    if kind == "POLICY_DECISION":
        return f"{p.get('policy_id')}@{p.get('policy_version')}: {p.get('decision')} {_short(p.get('reasons') or '', 80)}"
    if kind == "SIDE_EFFECT":
        return f"{p.get('capability_id')} {p.get('status')} ({p.get('side_effect_id')})"
    if kind == "PROMPT_COMPILED":
        return (
            f"{p.get('template_version')} {p.get('compiled_hash')} ({p.get('token_count')} tokens)"
        )
    if kind == "CONTEXT_SNAPSHOT":
        return f"{p.get('snapshot_id')}: {len(p.get('message_refs') or [])} messages"
    if kind == "APPROVAL":
        return (
            f"{p.get('decision') or p.get('status')} by {p.get('approver') or p.get('decided_by')}"
        )
    if kind in ("RUN_COMPLETED", "RUN_FAILED"):
        return _short(p.get("outcome") or p.get("error") or p)
    if kind == "CLOCK_READ":
        return _short(p.get("value") or p)
    return _short(p)


async def verify_view(stores: Stores, run_id: str) -> dict[str, Any]:
    """``runs verify --json``: intact, or the first broken sequence and why."""
    return (await stores.ledger.verify(run_id)).report()


async def compare_view(
    stores: Stores,
    source_run_id: str,
    other_run_id: str,
    comparison: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Two runs side by side as the HTML report shows them (``forensics.report``), with the
    comparison of the second against the first (``comparison``: a replay's own, as its
    outcome recorded it; computed here when None)."""
    from forensics.report import side_by_side_html
    from models.comparison import compare_trajectories
    from models.replay import ReplayComparison
    from runtime.trajectory import load_trajectory

    source = await load_trajectory(stores.ledger, source_run_id)
    other = await load_trajectory(stores.ledger, other_run_id)
    if comparison is not None:
        fields = {k: v for k, v in comparison.items() if k in ReplayComparison.model_fields}
        compared = ReplayComparison.model_validate(fields)
    else:
        compared = compare_trajectories(source, other)
    return {
        "source_run_id": source_run_id,
        "other_run_id": other_run_id,
        "comparison": {**compared.model_dump(mode="json"), "critical": compared.critical},
        "table": side_by_side_html(source, other, compared),
    }


async def completeness_view(stores: Stores, run_id: str) -> dict[str, Any]:
    """A run's evidence completeness (rule 14): the score and the confidence it allows."""
    completeness = await evidence_completeness(
        stores.ledger, stores.evidence, stores.artifacts, run_id
    )
    return {"summary": completeness.summary(), "confidence": completeness.confidence.value}


async def incident_side_effects(stores: Stores, view: dict[str, Any]) -> list[dict[str, Any]]:
    """What really happened to each write of the incident's source run (the report's "side
    effects' truth"): status history from the chain, reconciliation or the human's word,
    receipt. ``view``: the incident's status as ``incident_status_view`` gives it."""
    from forensics.side_effect_truth import side_effect_truths
    from models.incident_flow import IncidentView, ReconcileOutcome

    outcomes = tuple(ReconcileOutcome.model_validate(o) for o in view.get("side_effects") or ())
    incident = IncidentView(
        incident_id=view["incident_id"], source_run_id=view["source_run_id"], side_effects=outcomes
    )
    truths = await side_effect_truths(
        stores.ledger, stores.evidence, incident.source_run_id, incident
    )
    return [t.model_dump(mode="json") for t in truths]


#: the characters of a compiled prompt an event page shows
PROMPT_SHOWN = 20_000


async def event_view(stores: Stores, run_id: str, sequence: int) -> dict[str, Any]:
    """One event's sanitized view (``app.privacy.read_evidence``); a compiled prompt's event
    also carries the prompt's text (what the model was sent as the system message: template,
    system policy, tool schemas; the conversation is in the context snapshot)."""
    from app.privacy import read_evidence

    view = await read_evidence(stores, run_id, sequence)
    payload = view.get("payload")
    if view.get("type") == "PROMPT_COMPILED" and isinstance(payload, dict):
        ref = payload.get("content_ref")
        if isinstance(ref, str) and await stores.artifacts.exists(ref):
            text = (await stores.artifacts.get(ref)).decode(errors="replace")
            view = {**view, "compiled_prompt": text[:PROMPT_SHOWN]}
    if view.get("type") == "CONTEXT_SNAPSHOT" and isinstance(payload, dict):
        view = {**view, "messages": await _messages(stores, payload.get("message_refs") or [])}
    return view


#: the messages of a context snapshot an event page shows
MESSAGES_SHOWN = 100


async def _messages(stores: Stores, refs: list[Any]) -> list[dict[str, Any]]:
    """A context snapshot's messages (stored sanitized by the recorder), each as role and
    content, or what is missing."""
    out: list[dict[str, Any]] = []
    for ref in refs[:MESSAGES_SHOWN]:
        if not isinstance(ref, str) or not await stores.artifacts.exists(ref):
            out.append({"role": "?", "content": f"(missing: {ref})"})
            continue
        message = orjson.loads(await stores.artifacts.get(ref))
        if not isinstance(message, dict):
            message = {"role": "?", "content": message}
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        calls = message.get("tool_calls")
        if calls:
            text = f"{text or ''} {orjson.dumps(calls).decode()}".strip()
        out.append({"role": message.get("role", "?"), "content": text[:PROMPT_SHOWN]})
    return out


async def incidents_list(
    stores: Stores, *, source_run_id: str | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    """Incidents newest first (of one run when ``source_run_id``): id, run, phase, failure
    type and signature once signed, when opened and last updated."""
    found = await stores.incidents.list_incidents(source_run_id=source_run_id, limit=limit)
    return [i.model_dump(mode="json", exclude={"record"}) for i in found]
