"""What the activities report when a replay or an incident ends: metrics and one summary log
line (structlog's "canonical log line"), both taken from results the activities already hold
and from the replay's own stored run — never from inside the replay engine, whose steps may
run in a sandboxed child process.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from decimal import Decimal

import structlog

from activities import metrics
from models import ExecutionEventType, ReplayMode, RunStatus
from models.budget import BudgetUsage
from models.incident_flow import IncidentView, ReconcileOutcome
from models.replay_flow import ComparisonResult, ReplayPlan, StepOutput
from runtime.ports import EventLedger

log = structlog.get_logger("replaybook.summary")
E = ExecutionEventType
_READ = frozenset({E.FIXTURE_MISS, E.WRITE_BLOCKED, E.SIDE_EFFECT, E.STEP_COMPLETED, E.RUN_STARTED})


@dataclass
class ReplayRunFacts:
    """What a replay run recorded, read back from the ledger once it ended."""

    steps: int = 0
    usage: BudgetUsage = field(default_factory=BudgetUsage)
    duration_seconds: float = 0.0
    fixture_misses: list[str] = field(default_factory=list)
    writes_blocked: list[str] = field(default_factory=list)
    writes_executed: list[str] = field(default_factory=list)
    stopped: str | None = None


async def replay_run_facts(ledger: EventLedger, replay_id: str) -> ReplayRunFacts:
    facts = ReplayRunFacts()
    loaded = await ledger.events_with_payloads(replay_id, types=_READ, missing_ok=True)
    if loaded:
        facts.duration_seconds = max(
            0.0, (loaded[-1][0].recorded_at - loaded[0][0].recorded_at).total_seconds()
        )
    executed: dict[str, str] = {}
    for event, data in loaded:
        payload = json.loads(data) if data else {}
        if event.type is E.FIXTURE_MISS:
            facts.fixture_misses.append(payload.get("capability_id", "unknown"))
        elif event.type is E.WRITE_BLOCKED:
            facts.writes_blocked.append(payload.get("capability_id", "unknown"))
        elif event.type is E.SIDE_EFFECT and payload.get("status") != "PLANNED":
            # one per side effect (each status transition is an event of its own)
            executed[payload.get("side_effect_id", "")] = payload.get("capability_id", "unknown")
        elif event.type is E.STEP_COMPLETED and "replay_step" in payload:
            step = StepOutput.model_validate(payload["replay_step"])
            facts.steps += step.steps
            facts.usage = facts.usage.plus(step.usage)
    facts.writes_executed = list(executed.values())
    run = await ledger.get_run(replay_id)
    if run.status is RunStatus.FAILED and isinstance(run.outcome, dict):
        # the engine writes {"stopped": why}, close_replay_run {"ended": why}
        reason = run.outcome.get("stopped") or run.outcome.get("ended")
        facts.stopped = str(reason) if reason else "failed"
    return facts


def replay_result(reproduced: bool, stopped: str | None) -> str:
    if stopped:
        return "stopped"
    return "reproduced" if reproduced else "diverged"


async def replay_compared(ledger: EventLedger, plan: ReplayPlan, result: ComparisonResult) -> None:
    """Count a replay that reached COMPARING and log its summary line (once per process).
    Observing never fails the replay: an error here is logged and the comparison stands."""
    if not metrics.once(f"replay:{plan.replay_id}"):
        return
    try:
        await _replay_compared(ledger, plan, result)
    except Exception as exc:
        log.warning("replay not observed", replay_id=plan.replay_id, error=repr(exc))


async def _replay_compared(ledger: EventLedger, plan: ReplayPlan, result: ComparisonResult) -> None:
    facts = await replay_run_facts(ledger, plan.replay_id)
    mode = plan.mode.value
    outcome = replay_result(result.reproduced, facts.stopped)
    metrics.REPLAY_TOTAL.labels(mode=mode, result=outcome).inc()
    metrics.REPLAY_DURATION.labels(mode=mode).observe(facts.duration_seconds)
    metrics.REPLAY_STEPS.labels(mode=mode).observe(facts.steps)
    metrics.count_diffs(d.type.value for d in result.comparison.diffs)
    for capability in facts.fixture_misses:
        metrics.FIXTURE_MISS_TOTAL.labels(capability=capability).inc()
    for capability in facts.writes_blocked:
        metrics.WRITE_BLOCKED_TOTAL.labels(capability=capability).inc()
    for capability in facts.writes_executed:
        metrics.WRITE_EXECUTED_TOTAL.labels(capability=capability).inc()
    usage = facts.usage
    metrics.BUDGET_USED.labels(mode=mode, resource="model_calls").inc(usage.model_calls)
    metrics.BUDGET_USED.labels(mode=mode, resource="tokens").inc(usage.tokens)
    metrics.BUDGET_USED.labels(mode=mode, resource="cost").inc(float(usage.cost))
    budget = plan.budget
    ratios = {
        "model_calls": metrics.budget_ratio(usage.model_calls, budget.max_model_calls),
        "tokens": metrics.budget_ratio(usage.tokens, budget.max_tokens),
        "cost": metrics.budget_ratio(usage.cost, budget.max_cost),
        "duration": metrics.budget_ratio(
            facts.duration_seconds,
            budget.max_duration.total_seconds() if budget.max_duration else None,
        ),
    }
    for resource, ratio in ratios.items():
        if ratio is not None:
            metrics.BUDGET_USED_RATIO.labels(resource=resource).observe(ratio)
    budget_stop = facts.stopped is not None and facts.stopped.startswith(
        ("budget", "BudgetExhausted")
    )
    if budget_stop:
        metrics.BUDGET_EXHAUSTED_TOTAL.labels(mode=mode).inc()
    comparison = result.comparison
    log.info(
        "replay summary",
        replay_id=plan.replay_id,
        run_id=plan.source_run_id,
        mode=mode,
        result=outcome,
        reproduced=result.reproduced,
        same_outcome=comparison.same_outcome,
        same_side_effects=comparison.same_side_effects,
        answer_similarity=round(comparison.answer_similarity, 3),
        # by type, counted: a long diverging run has thousands (one log line, not 150 KB)
        diffs=dict(collections.Counter(d.type.value for d in comparison.diffs)),
        first_divergent_step=comparison.first_divergent_step,
        steps=facts.steps,
        duration_seconds=round(facts.duration_seconds, 3),
        model_calls=usage.model_calls,
        tokens=usage.tokens,
        cost=str(usage.cost) if usage.cost != Decimal(0) else "0",
        budget_used={k: round(v, 3) for k, v in ratios.items() if v is not None},
        fixture_misses=len(facts.fixture_misses),
        writes_blocked=len(facts.writes_blocked),
        writes_executed=len(facts.writes_executed),
        stopped=facts.stopped,
        simulation=plan.simulation,
    )


def replay_ended_early(replay_id: str, mode: ReplayMode | str, result: str, reason: str) -> None:
    """Count a replay that never reached COMPARING (failed in PREPARING, or canceled)."""
    if not metrics.once(f"replay:{replay_id}"):
        return
    mode_value = mode.value if isinstance(mode, ReplayMode) else mode
    metrics.REPLAY_TOTAL.labels(mode=mode_value, result=result).inc()
    log.info("replay summary", replay_id=replay_id, mode=mode_value, result=result, reason=reason)


def reconciled(outcome: ReconcileOutcome, *, by_human: bool) -> None:
    if not metrics.once(f"reconcile:{by_human}:{outcome.side_effect_id}:{outcome.status}"):
        return
    if outcome.needs_human:
        result = "needs_human"
    else:
        result = "applied" if outcome.applied else "not_applied"
        if by_human:
            result = f"human_{result}"
    metrics.RECONCILIATION_TOTAL.labels(result=result).inc()


def regression_case_created(case_id: str) -> None:
    if metrics.once(f"case:{case_id}"):
        metrics.REGRESSION_CASE_TOTAL.inc()


def incident_ended(view: IncidentView) -> None:
    """Count an incident that reached COMPLETED or FAILED and log its summary line."""
    if not metrics.once(f"incident:{view.incident_id}:{view.phase.value}"):
        return
    sig = view.signature
    # counted under the human's failure type once confirmed (the automatic one is logged)
    metrics.INCIDENT_TOTAL.labels(
        phase=view.phase.value, failure_type=view.failure_type or "UNSIGNED"
    ).inc()
    log.info(
        "incident summary",
        incident_id=view.incident_id,
        run_id=view.source_run_id,
        phase=view.phase.value,
        failure_type=view.failure_type,
        automatic_failure_type=view.automatic_failure_type,
        signature=sig.signature if sig else None,
        side_effects={
            s.side_effect_id: f"{s.status} applied={s.applied}" for s in view.side_effects
        },
        replays=[
            {
                "replay_id": r.replay_id,
                "label": r.label,
                "reproduced": r.reproduced,
                "runs": r.runs,
                "rate": r.rate,
            }
            for r in view.replays
        ],
        confirmed_by=view.confirmation.verified_by if view.confirmation else None,
        fix_version=view.confirmation.fix_version if view.confirmation else None,
        regression_case_id=view.regression_case_id,
        error=view.error,
        duration_seconds=(
            round((view.timeline[-1].at - view.timeline[0].at).total_seconds(), 3)
            if view.timeline
            else None
        ),
    )
