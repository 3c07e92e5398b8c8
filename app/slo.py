"""``replaybook slo``: the seed's SLOs computed from the stored evidence.

A **critical run** is a recorded agent run (not a replay) that wrote to the outside world —
its side-effect ledger has at least one entry — or that an incident was opened for. Those are
the runs an investigation may need to reconstruct, so their evidence must be complete (6/6).

| objective | value | goal |
| --- | --- | --- |
| ``critical_run_evidence_completeness`` | % of critical runs scored 6/6 | 100% |
| ``unknown_auto_retries`` | side effects executed again after UNKNOWN without a reconciliation proving them not applied | 0 |
| ``unreconciled_critical_side_effects`` | side effects of recorded runs still UNKNOWN or EXECUTING past their lease | 0 |
| ``replays_with_production_write`` | replay runs that recorded a side effect or a WRITE tool call that was not blocked | 0 |
| ``confirmed_incident_regression_coverage`` | % of confirmed incidents with a regression case | 100% |

A replay worker holds no write credential, so using one can only show in the evidence as a
write the replay executed: both are the fourth objective.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from models import ExecutionEventType, SideEffectClass, SideEffectRecord, SideEffectStatus
from models.slo import SloReport, ratio_objective, report, retried_while_unknown, zero_objective
from runtime.completeness import evidence_completeness
from stores.bundle import Stores
from stores.sql.slo_queries import SideEffectFact, SqlSloFacts

E = ExecutionEventType


async def _runs(facts: SqlSloFacts) -> dict[str, bool]:
    """run id -> whether it is a replay run."""
    return {
        run_id: labels.get("kind") == "replay"
        for run_id, labels in (await facts.run_labels()).items()
    }


async def _replay_write_offenders(facts: SqlSloFacts, replays: set[str]) -> set[str]:
    """Replay runs with a recorded side effect, or more WRITE tool calls than blocked writes."""
    if not replays:
        return set()
    blocked: Counter[str] = Counter()
    offenders: set[str] = set()
    for run_id, type_, n in await facts.event_counts([E.SIDE_EFFECT, E.WRITE_BLOCKED]):
        if run_id not in replays:
            continue
        if type_ == str(E.SIDE_EFFECT):
            offenders.add(run_id)
        else:
            blocked[run_id] += n
    writes: Counter[str] = Counter()
    for run_id, record in await facts.tool_fixtures():
        if run_id not in replays:
            continue
        if record.get("side_effect_class", SideEffectClass.WRITE.value) == "WRITE":
            writes[run_id] += 1
    offenders.update(run_id for run_id, n in writes.items() if n > blocked[run_id])
    return offenders


async def _auto_retried(stores: Stores, run_ids: set[str]) -> set[str]:
    offenders: set[str] = set()
    for run_id in sorted(run_ids):
        history: dict[str, list[tuple[SideEffectStatus, bool | None]]] = {}
        loaded = await stores.ledger.events_with_payloads(
            run_id, types=frozenset({E.SIDE_EFFECT}), missing_ok=True
        )
        for _, data in loaded:
            if data is None:
                continue
            record = SideEffectRecord.model_validate_json(data)
            history.setdefault(record.side_effect_id, []).append(
                (record.status, record.reconciled_applied)
            )
        offenders.update(sid for sid, h in history.items() if retried_while_unknown(h))
    return offenders


def _expired(effect: SideEffectFact, lease_end: datetime) -> bool:
    """EXECUTING since before ``lease_end``: its process died, its outcome is unknown."""
    return (
        effect.status == SideEffectStatus.EXECUTING.value
        and effect.updated_at is not None
        and effect.updated_at < lease_end
    )


async def compute_slos(stores: Stores) -> SloReport:
    facts = stores.slo_facts
    runs = await _runs(facts)
    replays = {run_id for run_id, is_replay in runs.items() if is_replay}
    effects = [s for s in await facts.side_effects() if s.run_id not in replays]
    lease_end = stores.ledger.clock() - timedelta(seconds=stores.side_effect_lease_seconds)
    incidents = await facts.incidents()
    with_case = await facts.incidents_with_regression_case()

    critical = {s.run_id for s in effects} | {
        i.source_run_id for i in incidents if i.source_run_id not in replays
    }
    incomplete = set()
    for run_id in critical:
        scored = await evidence_completeness(
            stores.ledger, stores.evidence, stores.artifacts, run_id
        )
        if scored.score < scored.total:
            incomplete.add(f"{run_id} ({scored.summary()})")

    confirmed, uncovered = 0, set()
    for incident in incidents:
        if incident.record.get("confirmation"):
            confirmed += 1
            if incident.incident_id not in with_case:
                uncovered.add(incident.incident_id)

    return report(
        [
            ratio_objective(
                "critical_run_evidence_completeness",
                "critical runs (wrote a side effect, or an incident's source) with 6/6 evidence",
                len(critical) - len(incomplete),
                len(critical),
                incomplete,
            ),
            zero_objective(
                "unknown_auto_retries",
                "UNKNOWN side effects executed again without a reconciliation proving them not applied",
                await _auto_retried(stores, {s.run_id for s in effects}),
            ),
            zero_objective(
                "unreconciled_critical_side_effects",
                "side effects of recorded runs still UNKNOWN, or EXECUTING past their lease "
                "(not reconciled)",
                (
                    f"{s.side_effect_id} (run {s.run_id})"
                    for s in effects
                    if s.status == SideEffectStatus.UNKNOWN.value or _expired(s, lease_end)
                ),
            ),
            zero_objective(
                "replays_with_production_write",
                "replays that used a production write credential or executed a write",
                await _replay_write_offenders(facts, replays),
            ),
            ratio_objective(
                "confirmed_incident_regression_coverage",
                "confirmed incidents that produced a regression case",
                confirmed - len(uncovered),
                confirmed,
                uncovered,
            ),
        ]
    )


def render_text(slo: SloReport) -> str:
    lines = []
    for r in slo.objectives:
        if r.kind == "ratio":
            value = "n/a" if r.value is None else f"{r.value:g}%"
            goal = f"{r.goal:g}%"
        else:
            value, goal = f"{r.value:g}", f"{r.goal:g}"
        verdict = "PASS" if r.passed else "FAIL"
        lines.append(f"{verdict}  {r.name:<40} {value:>8}  (goal {goal})  {r.detail}")
        lines.extend(f"        {o}" for o in r.offenders)
    lines.append("all SLOs pass" if slo.passed else "SLO violated")
    return "\n".join(lines)
