"""Three verdicts for a replay (issue 16): REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE.

A replay that stopped before its end — a fixture miss, its budget, the sandbox, a step error —
did not show whether the failure happens: it is INCONCLUSIVE with the reason, and a repeat's
rate and interval are computed over the conclusive runs only (null when there is none).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from models.base import Record
from models.enums import InconclusiveReason, ReplayStatus, ReplayVerdict
from models.replay_flow import ReplayOutcome
from models.statistics import wilson_interval

__all__ = [
    "Verdict",
    "failure_verdict",
    "manifest_drift",
    "outcome_summary",
    "outcome_verdict",
    "repeat_verdict",
    "stop_verdict",
    "summary_line",
    "verdict_summary",
]

#: the prefixes of a step's ``stopped`` text (``"<ErrorType>: message"`` or ``"budget: …"``)
_STOP_KINDS: tuple[tuple[str, InconclusiveReason], ...] = (
    ("budget:", InconclusiveReason.BUDGET),
    ("BudgetExhaustedError", InconclusiveReason.BUDGET),
    ("FixtureMissError", InconclusiveReason.FIXTURE_MISS),
    ("SandboxViolationError", InconclusiveReason.SANDBOX_VIOLATION),
    ("SandboxQuotaError", InconclusiveReason.SANDBOX_VIOLATION),
)


class Verdict(Record):
    """One replay's verdict; ``reason`` is the one line that says why it is inconclusive."""

    verdict: ReplayVerdict
    inconclusive_reason: InconclusiveReason | None = None
    reason: str | None = None

    @property
    def conclusive(self) -> bool:
        return self.verdict is not ReplayVerdict.INCONCLUSIVE


def _inconclusive(kind: InconclusiveReason, text: str) -> Verdict:
    return Verdict(
        verdict=ReplayVerdict.INCONCLUSIVE, inconclusive_reason=kind, reason=f"{kind.value}: {text}"
    )


def stop_verdict(stopped: str | None, reproduced: bool) -> Verdict:
    """The verdict of a replay that ran to its comparison: INCONCLUSIVE when its steps stopped
    early for a reason that is not the agent's own behaviour (a refused action is behaviour:
    the comparison decides), else REPRODUCED or NOT_REPRODUCED."""
    if stopped is not None:
        for prefix, kind in _STOP_KINDS:
            if stopped.startswith(prefix):
                text = stopped.split(":", 1)[1].strip() if ":" in stopped else stopped
                return _inconclusive(kind, text)
    return Verdict(verdict=ReplayVerdict.REPRODUCED if reproduced else ReplayVerdict.NOT_REPRODUCED)


def failure_verdict(error_type: str | None, reason: str, *, preparing: bool = False) -> Verdict:
    """The verdict of a replay that FAILED: refused in PREPARING, or a step that failed for good
    (a sandbox violation named by its error type, any other error a step error)."""
    if preparing:
        return _inconclusive(InconclusiveReason.PREPARING, reason)
    if error_type in ("SandboxViolationError", "SandboxQuotaError"):
        return _inconclusive(InconclusiveReason.SANDBOX_VIOLATION, reason)
    return _inconclusive(InconclusiveReason.STEP_ERROR, reason)


def verdict_summary(verdicts: Iterable[Verdict]) -> dict[str, Any]:
    """``{"reproduced", "not_reproduced", "inconclusive", "runs", "rate", "ci95",
    "inconclusive_reasons"}``: ``rate`` and the 95 % Wilson ``ci95`` are over the conclusive
    runs only, and ``None`` when no run is conclusive; ``inconclusive_reasons`` counts each
    reason."""
    seen = list(verdicts)
    reproduced = sum(v.verdict is ReplayVerdict.REPRODUCED for v in seen)
    not_reproduced = sum(v.verdict is ReplayVerdict.NOT_REPRODUCED for v in seen)
    conclusive = reproduced + not_reproduced
    reasons = Counter(v.inconclusive_reason.value for v in seen if v.inconclusive_reason)
    ci95: list[float] | None = None
    if conclusive:
        low, high = wilson_interval(reproduced, conclusive)
        ci95 = [round(low, 4), round(high, 4)]
    return {
        "reproduced": reproduced,
        "not_reproduced": not_reproduced,
        "inconclusive": len(seen) - conclusive,
        "runs": len(seen),
        "rate": reproduced / conclusive if conclusive else None,
        "ci95": ci95,
        "inconclusive_reasons": dict(sorted(reasons.items())),
    }


def summary_line(summary: dict[str, Any]) -> str:
    """``reproduced 0/3 conclusive (rate 0.00, 95% CI 0.00-0.56); inconclusive 2/5 (BUDGET 2)``:
    the one line the CLI prints for a summary (older summaries lack the inconclusive counts)."""
    reproduced = int(summary.get("reproduced") or 0)
    inconclusive = int(summary.get("inconclusive") or 0)
    runs = int(summary.get("runs") or 0)
    not_reproduced = summary.get("not_reproduced")
    if not_reproduced is None:
        not_reproduced = max(runs - reproduced - inconclusive, 0)
    conclusive = int(not_reproduced) + reproduced
    rate, ci = summary.get("rate"), summary.get("ci95")
    line = f"reproduced {reproduced}/{conclusive} conclusive"
    if rate is None or not isinstance(ci, list | tuple):
        line += " (rate not established: no conclusive run)"
    else:
        line += f" (rate {float(rate):.2f}, 95% CI {float(ci[0]):.2f}-{float(ci[1]):.2f})"
    if inconclusive:
        reasons = summary.get("inconclusive_reasons") or {}
        named = ", ".join(f"{k} {v}" for k, v in dict(reasons).items())
        line += f"; inconclusive {inconclusive}/{runs}" + (f" ({named})" if named else "")
    return line


def outcome_verdict(outcome: ReplayOutcome) -> Verdict:
    """A single replay's verdict (derived for one recorded before verdicts existed: a completed
    replay not stopped early is conclusive, anything else inconclusive)."""
    if outcome.verdict is not None:
        return Verdict(
            verdict=outcome.verdict,
            inconclusive_reason=outcome.inconclusive_reason,
            reason=outcome.verdict_reason,
        )
    if outcome.status is ReplayStatus.COMPLETED and outcome.reproduced is not None:
        return stop_verdict(outcome.reason, outcome.reproduced)
    return failure_verdict(None, outcome.reason or outcome.status.value)


def outcome_summary(outcome: ReplayOutcome) -> dict[str, Any]:
    """The verdict summary of a replay: a ``--repeat`` parent's own, or one run's. A parent
    recorded before verdicts existed keeps its old counts (every run taken as conclusive)."""
    summary = outcome.summary
    if summary is None:
        return verdict_summary([outcome_verdict(outcome)])
    if "inconclusive" in summary:
        return dict(summary)
    old: dict[str, Any] = dict(summary)
    runs, reproduced = int(old.get("runs") or 0), int(old.get("reproduced") or 0)
    return {
        **summary,
        "not_reproduced": runs - reproduced,
        "inconclusive": 0,
        "inconclusive_reasons": {},
    }


def repeat_verdict(summary: dict[str, Any]) -> tuple[ReplayVerdict, str]:
    """The one verdict of a ``--repeat`` replay, from its runs' counts, with why: REPRODUCED
    when any conclusive run reproduced the failure (it happens, at the summary's rate);
    NOT_REPRODUCED only when every run concluded and none did; else INCONCLUSIVE — a run cut
    short might have reproduced it, so "no longer reproduces" is not shown."""
    reproduced = int(summary.get("reproduced") or 0)
    inconclusive = int(summary.get("inconclusive") or 0)
    runs = int(summary.get("runs") or 0)
    counted = summary_line(summary)
    if reproduced:
        return ReplayVerdict.REPRODUCED, counted
    if runs and not inconclusive:
        return ReplayVerdict.NOT_REPRODUCED, counted
    return ReplayVerdict.INCONCLUSIVE, counted


def manifest_drift(recorded: Record | None, current: Record | None, prefix: str) -> list[str]:
    """The keys (``environment.python_version``…) whose value the replay worker has and that
    differ from the recorded manifest's; a key either side did not record is not compared."""
    if recorded is None or current is None:
        return []
    before, now = recorded.model_dump(mode="json"), current.model_dump(mode="json")
    return [
        f"{prefix}.{key}"
        for key in sorted(before)
        if before[key] is not None and now.get(key) is not None and before[key] != now[key]
    ]
