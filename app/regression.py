"""The regression gate: replay every active incident case with a candidate (fixtures frozen,
writes blocked) and check its structural assertions. Used by ``replaybook regress`` and by
``regression_gate`` for a project's own pytest suite."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.candidates import tool_loop_problem
from app.replay_checks import candidate_problem, check_tools_module
from app.replays import new_replay_id
from models import FixtureMissPolicy
from models.errors import InvalidInputError, NotFoundError
from models.gate_power import (
    DEFAULT_THRESHOLD,
    INTERVAL,
    counterfactual_threshold,
    gate_verdict,
    repeats_for_power,
    repeats_to_decide,
)
from models.ingest import TOOL_LOOP_GRAPH_ID
from models.queues import CONTROL_QUEUE
from models.regression import RegressionCase, evaluate_case
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from models.replay_plans import PlanFields, plan_for_candidates
from models.statistics import wilson_interval
from models.tools_module import ToolsModulePin
from models.verdicts import outcome_verdict
from runtime.trajectory import load_trajectory
from runtime.verification import require_verified

if TYPE_CHECKING:
    from temporalio.client import Client

    from runtime.replay.catalog import AgentCatalog
    from stores.bundle import Stores

#: the gate names its inputs as ``replaybook regress`` flags
GATE_FIELDS = PlanFields(
    candidate="--candidate",
    repeat="--repeat",
    tools_module="--tools-module",
    sandbox_live="--on-fixture-miss sandbox-live",
)


def candidate_plan(
    case_run_id: str,
    candidates: Sequence[tuple[str, str]],
    miss: FixtureMissPolicy,
    seed: int,
    tools_module: ToolsModulePin | None = None,
) -> ReplayPlan:
    """The gate's replay of one case with the candidate swapped in (and the team's tools
    answering its fixture misses, ``--tools-module``)."""
    return plan_for_candidates(
        case_run_id,
        dict(candidates),
        replay_id=new_replay_id("regress"),
        sampling_seed=seed,
        miss=miss,
        fields=GATE_FIELDS,
        tools_module=tools_module,
    )


def gated_graphs(
    catalogs: Mapping[str, AgentCatalog],
    candidates: Sequence[tuple[str, str]],
    graphs: Sequence[str] = (),
) -> list[str]:
    """The graphs the gate replays: ``graphs`` when named (each must know the candidate), else
    every graph that knows every part of the candidate. ``InvalidInputError`` naming the
    candidate when no graph does (an unknown ``prompt=v99`` is bad input, not a regression)."""
    for graph in graphs:
        if graph not in catalogs:
            raise InvalidInputError(
                f"--graph {graph!r} is not an agent this deployment replays "
                f"(known: {', '.join(sorted(catalogs))})",
                field="--graph",
            )
    named = list(graphs) or sorted(catalogs)
    problems = {
        g: [
            p
            for k, v in candidates
            if (p := tool_loop_problem(g, k) or candidate_problem(catalogs[g], k, v))
        ]
        for g in named
    }
    chosen = [g for g in named if not problems[g]]
    refused = [g for g in named if problems[g]]
    if (graphs and refused) or not chosen:
        pairs = ", ".join(f"{k}={v}" for k, v in candidates)
        why = "; ".join(problems[g][0] for g in refused)
        raise InvalidInputError(f"--candidate {pairs}: {why}", field="--candidate")
    return chosen


@dataclass(frozen=True)
class GateRepeats:
    """How many replays per case: ``count``, or (``count`` None: ``--repeat auto``) as many
    as catch a regression reproducing at ``rate`` with probability ``power`` at the case's
    threshold (``models.gate_power.repeats_for_power``). ``seeds``: replay exactly these
    sampling seeds (a recorded gate run's, ``--seeds``) instead of fresh ones; their number is
    then the count."""

    count: int | None = 5
    power: float = 0.9
    rate: float = 0.5
    seeds: tuple[int, ...] = ()
    #: the reproduction rate a candidate may show at most (None: the case's own)
    threshold: float | None = None

    def check(self) -> None:
        if self.count is not None and self.count < 1:
            raise InvalidInputError("--repeat must be at least 1 (or auto)", field="--repeat")
        if self.count is None:  # the arithmetic refuses a power, rate or threshold out of range
            repeats_for_power(self.power, self.rate, self.threshold or DEFAULT_THRESHOLD)

    @classmethod
    def from_flags(
        cls, repeat: str, power: float, rate: float, seeds: str | None, threshold: float | None
    ) -> GateRepeats:
        """``--repeat N|auto``, ``--power``, ``--rate``, ``--seeds``, ``--threshold`` as typed
        (``regress``, ``case run``); each bad value is bad input naming its flag (exit 2)."""
        count: int | None = None
        if repeat.strip().lower() != "auto":
            try:
                count = int(repeat)
            except ValueError:
                raise InvalidInputError(
                    f"--repeat must be a whole number or auto, not {repeat!r}", field="--repeat"
                ) from None
        drawn: tuple[int, ...] = ()
        if seeds:
            try:
                drawn = tuple(int(s) for s in seeds.split(",") if s.strip())
            except ValueError:
                raise InvalidInputError(
                    f"--seeds must be whole numbers separated by commas, not {seeds!r}",
                    field="--seeds",
                ) from None
            count = len(drawn)  # the seeds say how many
        if threshold is not None and not 0 <= threshold < 1:
            raise InvalidInputError(
                f"--threshold must be in [0, 1), not {threshold}", field="--threshold"
            )
        repeats = cls(count=count, power=power, rate=rate, seeds=drawn, threshold=threshold)
        try:
            repeats.check()
        except InvalidInputError as exc:  # the arithmetic names power, rate, threshold
            if exc.field in ("power", "rate", "threshold"):
                raise InvalidInputError(f"--{exc}", field=f"--{exc.field}") from None
            raise
        return repeats

    def per_case(self, threshold: float) -> int:
        if self.seeds:
            return len(self.seeds)
        if self.count is not None:
            return self.count
        return repeats_for_power(self.power, self.rate, threshold)

    def draw(self, n: int) -> list[int]:
        """The sampling seeds of one case's replays: the given ones, else fresh (recorded in
        the result, so the same run can be replayed with ``--seeds``)."""
        return (
            list(self.seeds) if self.seeds else [secrets.randbelow(2**31 - 1) + 1 for _ in range(n)]
        )


async def run_gate(
    client: Client,
    stores: Stores,
    candidates: Sequence[tuple[str, str]],
    *,
    repeat: int | GateRepeats = 5,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
    catalogs: Mapping[str, AgentCatalog] | None = None,
    graphs: Sequence[str] = (),
    on_case: Callable[[int, int], None] | None = None,
    tools_module: ToolsModulePin | None = None,
) -> dict[str, Any]:
    """Every active case, replayed with the candidate under fresh sampling seeds (recorded in
    the result): a case PASSES only when the upper end of the 95 % Wilson interval of its
    reproduction rate is at or below the case's threshold, FAILS when the lower end is above
    it (a regression), and is otherwise INCONCLUSIVE with the repeats that would decide
    (``models.gate_power``); a replay that stopped before its end counts in neither.
    ``repeat``: a count, or ``GateRepeats`` (``--repeat auto``, ``--seeds``, ``--threshold``).
    With the deployment's ``catalogs``, only the cases of the graphs the candidate applies to
    (or of ``graphs``) are replayed, and an unknown candidate is refused up front.
    ``on_case(done, total)`` is told after each case (a progress bar). ``tools_module``: the
    team's read-only tools, for the cases of tool-loop runs (each checked against the case
    run's tool catalogue and the candidate's before any replay)."""
    repeats = repeat if isinstance(repeat, GateRepeats) else GateRepeats(count=repeat)
    repeats.check()
    cases = await stores.incidents.active_cases()
    selected: list[str] | None = None
    if catalogs is not None:
        selected = gated_graphs(catalogs, candidates, graphs)
        cases = [c for c in cases if await _graph_of(stores, c) in selected]
    # a case whose source run does not verify gates nothing: refuse rather than replay it
    for case in cases:
        await require_verified(
            stores.ledger, case.source_run_id, to=f"gate on regression case {case.case_id}"
        )
    teams: dict[str, ToolsModulePin | None] = {}
    for case in cases:
        teams[case.case_id] = await _case_tools(stores, case, candidates, miss, tools_module)
    results: list[dict[str, Any]] = []
    for case in cases:
        if on_case is not None:
            on_case(len(results), len(cases))
        results.append(
            await _gate_case(client, stores, case, candidates, repeats, miss, teams[case.case_id])
        )
    return {
        "candidate": {k: v for k, v in candidates},
        "graphs": selected,
        "interval": INTERVAL,
        # every case PASSED: an inconclusive case is no pass, and no regression either
        "passed": all(r["passed"] for r in results),
        "regressions": sum(r["verdict"] == "FAILED" for r in results),
        "inconclusive": sum(r["verdict"] == "INCONCLUSIVE" for r in results),
        "cases": results,
    }


async def _case_tools(
    stores: Stores,
    case: RegressionCase,
    candidates: Sequence[tuple[str, str]],
    miss: FixtureMissPolicy,
    tools_module: ToolsModulePin | None,
) -> ToolsModulePin | None:
    """The tools module a case's replays use: only a tool-loop run's (an agent built on this
    runtime answers from its own READ providers), checked as ``replay start`` checks it."""
    if tools_module is None:
        return None
    run = await stores.ledger.get_run(case.source_run_id)
    if run.graph_id != TOOL_LOOP_GRAPH_ID:
        return None
    swapped = tuple(value for kind, value in candidates if kind == "tools")
    await check_tools_module(stores, run, tools_module, swapped, "--tools-module", miss)
    return tools_module


async def case_threshold(stores: Stores, case: RegressionCase) -> tuple[float, str]:
    """The case's threshold and where it comes from: the upper end of the 95 % interval of the
    rate its incident's counterfactual of the confirmed fix showed (else of its best
    counterfactual), or ``DEFAULT_THRESHOLD`` when the incident has none."""
    try:
        incident = await stores.incidents.get_incident(case.incident_id)
    except NotFoundError:
        return DEFAULT_THRESHOLD, "default"
    view = incident.record or {}
    replays = view.get("replays") if isinstance(view, dict) else None
    confirmation = view.get("confirmation") if isinstance(view, dict) else None
    fix = confirmation.get("fix_version") if isinstance(confirmation, dict) else None
    rows = []
    for r in replays if isinstance(replays, list) else []:
        ci = r.get("ci95") if isinstance(r, dict) else None
        rate = r.get("rate") if isinstance(r, dict) else None
        if isinstance(ci, list) and len(ci) == 2 and isinstance(rate, int | float):
            rows.append((str(r.get("label")), float(rate), (float(ci[0]), float(ci[1]))))  # type: ignore[union-attr,arg-type]
    found = counterfactual_threshold(rows, fix if isinstance(fix, str) else None)
    if found is None:
        return DEFAULT_THRESHOLD, "default"
    return found, f"counterfactual of {case.incident_id}"


async def _graph_of(stores: Stores, case: RegressionCase) -> str:
    return (await stores.ledger.get_run(case.source_run_id)).graph_id


async def _gate_case(
    client: Client,
    stores: Stores,
    case: RegressionCase,
    candidates: Sequence[tuple[str, str]],
    repeats: GateRepeats,
    miss: FixtureMissPolicy,
    tools_module: ToolsModulePin | None = None,
) -> dict[str, Any]:
    """One case replayed with the candidate (fresh seeds, or the given ones) and decided."""
    from workflows.replay import ReplayWorkflow

    if repeats.threshold is not None:
        threshold, source = repeats.threshold, "--threshold"
    else:
        threshold, source = await case_threshold(stores, case)
    seeds = repeats.draw(repeats.per_case(threshold))
    plans = [
        candidate_plan(case.source_run_id, candidates, miss, seed, tools_module) for seed in seeds
    ]
    outcomes = await asyncio.gather(
        *(
            client.execute_workflow(
                ReplayWorkflow.run,
                ReplayWorkflowInput(plan=p),
                id=p.replay_id,
                task_queue=CONTROL_QUEUE,
            )
            for p in plans
        )
    )
    failures: list[dict[str, Any]] = []
    inconclusive: list[dict[str, Any]] = []
    reproduced = conclusive = 0
    for plan, outcome in zip(plans, outcomes, strict=True):
        verdict = outcome_verdict(outcome)
        if not verdict.conclusive:
            # it stopped before its end (a fixture miss, its budget, a step error…): it shows
            # neither that the case holds nor that it fails (issue 16)
            inconclusive.append(
                {
                    "replay_id": plan.replay_id,
                    "inconclusive_reason": verdict.inconclusive_reason.value
                    if verdict.inconclusive_reason
                    else None,
                    "reason": verdict.reason or outcome.reason or outcome.status.value,
                }
            )
            continue
        trajectory = await load_trajectory(stores.ledger, plan.replay_id)
        broken = [
            {"replay_id": plan.replay_id, "assertion": f.assertion, "reason": f.reason}
            for f in evaluate_case(case, trajectory).failures
        ]
        conclusive += 1
        reproduced += bool(broken)
        failures.extend(broken)
    decided = gate_verdict(reproduced, conclusive, threshold)
    low, high = wilson_interval(reproduced, conclusive)
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "verdict": decided,
        "passed": decided == "PASSED",
        "reproduced": reproduced,
        "conclusive": conclusive,
        "ci95": [round(low, 4), round(high, 4)],
        "threshold": round(threshold, 4),
        "threshold_source": source,
        # the conclusive replays that would decide if the observed rate held (None: never)
        "repeats_to_decide": None
        if decided != "INCONCLUSIVE"
        else repeats_to_decide(reproduced, conclusive, threshold),
        "seeds": seeds,
        "replays": [p.replay_id for p in plans],
        "failures": failures,
        "inconclusive": inconclusive,
    }


def case_verdict(
    failures: list[dict[str, Any]],
    inconclusive: list[dict[str, Any]],
    *,
    runs: int | None = None,
    threshold: float = DEFAULT_THRESHOLD,
) -> str:
    """The case's verdict from its replays' broken assertions (``failures``, each naming its
    ``replay_id``) and inconclusive replays. With ``runs`` (the replays in all), as the gate
    decides (``models.gate_power.gate_verdict`` against ``threshold``); without, the verdict
    of old: ``FAILED`` when a conclusive replay broke an assertion, else ``INCONCLUSIVE`` when
    a replay showed nothing, else ``PASSED``."""
    if runs is not None:
        reproduced = len({f.get("replay_id") for f in failures})
        return gate_verdict(reproduced, runs - len(inconclusive), threshold)
    if failures:
        return "FAILED"
    return "INCONCLUSIVE" if inconclusive else "PASSED"
