"""Prometheus metrics, defined once on prometheus_client's default registry.

Counters are per process, as Prometheus expects: every worker (and the API, which mounts the
same registry) exposes what *it* did, and PromQL sums them (``sum by (mode, result)
(rate(agent_replay_total[5m]))``). They are incremented in the activities from results those
already have — step outputs, the stored replay trajectory, comparisons, reconciliation
outcomes, regression cases — never inside the replay engine, whose steps may run in a
sandboxed child process whose counters would be lost. The one exception,
``agent_unknown_side_effect_total``, is counted where an UNKNOWN is recorded
(``runtime.unknown_outcomes``).

A retried activity could count the same replay twice; a small per-process memory of what was
counted (``_once``) prevents that for the common case (the retry lands on the same worker).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from decimal import Decimal

import structlog
from prometheus_client import REGISTRY, Counter, Histogram, start_http_server

# counted where an UNKNOWN is recorded (the recorder, the lease sweep), not in an activity
from runtime.unknown_outcomes import UNKNOWN_SIDE_EFFECT_TOTAL as UNKNOWN_SIDE_EFFECT_TOTAL

log = structlog.get_logger(__name__)

# the seed's metrics -----------------------------------------------------------------------------

REPLAY_TOTAL = Counter(
    "agent_replay",
    "Replays that ended, by mode and result (reproduced, diverged, stopped, failed, canceled).",
    ["mode", "result"],
)
FIXTURE_MISS_TOTAL = Counter(
    "agent_replay_fixture_miss",
    "Requests a replay found no recorded fixture for, by capability.",
    ["capability"],
)
BEHAVIOR_DIFF_TOTAL = Counter(
    "agent_replay_behavior_diff",
    "Typed differences between source and replay trajectories, by diff type.",
    ["type"],
)
RECONCILIATION_TOTAL = Counter(
    "agent_reconciliation",
    "Reconciliations of UNKNOWN side effects, by result "
    "(applied, not_applied, needs_human, human_applied, human_not_applied).",
    ["result"],
)
REGRESSION_CASE_TOTAL = Counter(
    "agent_incident_regression_case",
    "Regression cases created from confirmed incidents.",
)

# replay cost, duration and safety ----------------------------------------------------------------

REPLAY_DURATION = Histogram(
    "agent_replay_duration_seconds",
    "Wall-clock time from PREPARING to the end of the last step, by mode.",
    ["mode"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600),
)
REPLAY_STEPS = Histogram(
    "agent_replay_steps",
    "Steps a replay executed, by mode.",
    ["mode"],
    buckets=(1, 2, 5, 10, 25, 50, 100, 250, 1000, 5000),
)
BUDGET_USED = Counter(
    "agent_replay_budget_used",
    "Budget consumed by replays, by resource (model_calls, tokens, cost).",
    ["mode", "resource"],
)
BUDGET_USED_RATIO = Histogram(
    "agent_replay_budget_used_ratio",
    "Share of a replay's budget it used, for each limited resource "
    "(model_calls, tokens, cost, duration).",
    ["resource"],
    buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.5),
)
BUDGET_EXHAUSTED_TOTAL = Counter(
    "agent_replay_budget_exhausted",
    "Replays stopped cleanly because a budget ran out, by mode.",
    ["mode"],
)
WRITE_BLOCKED_TOTAL = Counter(
    "agent_replay_write_blocked",
    "WRITE attempts a replay blocked (answered from the recording or dry-run), by capability.",
    ["capability"],
)
WRITE_EXECUTED_TOTAL = Counter(
    "agent_replay_write_executed",
    "WRITE side effects recorded in a replay run (SLO: 0), by capability.",
    ["capability"],
)
SANDBOX_VIOLATION_TOTAL = Counter(
    "agent_replay_sandbox_violation",
    "Calls a replay's sandboxed process made that its broker refused, by kind (the call, "
    "e.g. tool.read, or the quota: write_bytes, batch_calls, message_bytes, protocol).",
    ["kind"],
)
INCIDENT_TOTAL = Counter(
    "agent_incident",
    "Incidents that ended, by phase (COMPLETED or FAILED) and failure type.",
    ["phase", "failure_type"],
)

_counted: OrderedDict[str, None] = OrderedDict()
_COUNTED_MAX = 10_000


def once(key: str) -> bool:
    """True the first time ``key`` is seen in this process (bounded memory)."""
    if key in _counted:
        return False
    _counted[key] = None
    while len(_counted) > _COUNTED_MAX:
        _counted.popitem(last=False)
    return True


def count_diffs(types: Iterable[str]) -> None:
    for t in types:
        BEHAVIOR_DIFF_TOTAL.labels(type=t).inc()


def budget_ratio(used: float | Decimal, limit: float | Decimal | None) -> float | None:
    if limit is None or limit <= 0:
        return None
    return float(used) / float(limit)


# serving -----------------------------------------------------------------------------------------


def serve_metrics(port: int, addr: str = "0.0.0.0") -> None:
    """Serve the default registry at ``http://addr:port/metrics`` from a daemon thread."""
    start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("metrics served", port=port, path="/metrics")
