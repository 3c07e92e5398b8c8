"""The regression gate: replay every active incident case with a candidate (fixtures frozen,
writes blocked) and check its structural assertions. Used by ``replaybook regress`` and by
``regression_gate`` for a project's own pytest suite."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.replay_checks import candidate_problem
from app.replays import new_replay_id
from models import FixtureMissPolicy
from models.errors import InvalidInputError
from models.queues import CONTROL_QUEUE
from models.regression import RegressionCase, evaluate_case
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from models.replay_plans import PlanFields, plan_for_candidates
from models.verdicts import outcome_verdict
from runtime.trajectory import load_trajectory
from runtime.verification import require_verified
from stores.sql.incidents import SqlIncidentStore

if TYPE_CHECKING:
    from temporalio.client import Client

    from runtime.replay.catalog import AgentCatalog
    from stores.bundle import Stores

#: the gate names its inputs as ``replaybook regress`` flags
GATE_FIELDS = PlanFields(candidate="--candidate", repeat="--repeat")


def candidate_plan(
    case_run_id: str, candidates: Sequence[tuple[str, str]], miss: FixtureMissPolicy, seed: int
) -> ReplayPlan:
    """The gate's replay of one case with the candidate swapped in."""
    return plan_for_candidates(
        case_run_id,
        dict(candidates),
        replay_id=new_replay_id("regress"),
        sampling_seed=seed,
        miss=miss,
        fields=GATE_FIELDS,
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
        g: [p for k, v in candidates if (p := candidate_problem(catalogs[g], k, v))] for g in named
    }
    chosen = [g for g in named if not problems[g]]
    refused = [g for g in named if problems[g]]
    if (graphs and refused) or not chosen:
        pairs = ", ".join(f"{k}={v}" for k, v in candidates)
        why = "; ".join(problems[g][0] for g in refused)
        raise InvalidInputError(f"--candidate {pairs}: {why}", field="--candidate")
    return chosen


async def run_gate(
    client: Client,
    stores: Stores,
    candidates: Sequence[tuple[str, str]],
    *,
    repeat: int = 5,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
    catalogs: Mapping[str, AgentCatalog] | None = None,
    graphs: Sequence[str] = (),
    on_case: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Every active case, ``repeat`` times each: a case holds only if every replay holds
    (``PASSED``); one conclusive replay breaking an assertion is a regression (``FAILED``);
    otherwise a replay that stopped before its end leaves the case ``INCONCLUSIVE``.
    With the deployment's ``catalogs``, only the cases of the graphs the candidate applies to
    (or of ``graphs``) are replayed, and an unknown candidate is refused up front.
    ``on_case(done, total)`` is told after each case (a progress bar)."""
    if repeat < 1:
        raise InvalidInputError("--repeat must be at least 1", field="--repeat")
    cases = await SqlIncidentStore(stores.db).active_cases()
    selected: list[str] | None = None
    if catalogs is not None:
        selected = gated_graphs(catalogs, candidates, graphs)
        cases = [c for c in cases if await _graph_of(stores, c) in selected]
    # a case whose source run does not verify gates nothing: refuse rather than replay it
    for case in cases:
        await require_verified(
            stores.ledger, case.source_run_id, to=f"gate on regression case {case.case_id}"
        )
    results: list[dict[str, Any]] = []
    for case in cases:
        if on_case is not None:
            on_case(len(results), len(cases))
        results.append(await _gate_case(client, stores, case, candidates, repeat, miss))
    return {
        "candidate": {k: v for k, v in candidates},
        "graphs": selected,
        # every case PASSED: an inconclusive case is no pass, and no regression either
        "passed": all(r["passed"] for r in results),
        "regressions": sum(r["verdict"] == "FAILED" for r in results),
        "inconclusive": sum(r["verdict"] == "INCONCLUSIVE" for r in results),
        "cases": results,
    }


async def _graph_of(stores: Stores, case: RegressionCase) -> str:
    return (await stores.ledger.get_run(case.source_run_id)).graph_id


async def _gate_case(
    client: Client,
    stores: Stores,
    case: RegressionCase,
    candidates: Sequence[tuple[str, str]],
    repeat: int,
    miss: FixtureMissPolicy,
) -> dict[str, Any]:
    """One case replayed ``repeat`` times with the candidate, and its assertions checked."""
    from workflows.replay import ReplayWorkflow

    plans = [
        candidate_plan(case.source_run_id, candidates, miss, seed) for seed in range(1, repeat + 1)
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
        failures.extend(
            {"replay_id": plan.replay_id, "assertion": f.assertion, "reason": f.reason}
            for f in evaluate_case(case, trajectory).failures
        )
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "verdict": case_verdict(failures, inconclusive),
        "passed": not failures and not inconclusive,
        "replays": [p.replay_id for p in plans],
        "failures": failures,
        "inconclusive": inconclusive,
    }


def case_verdict(failures: list[dict[str, Any]], inconclusive: list[dict[str, Any]]) -> str:
    """``FAILED`` when a conclusive replay broke an assertion (a regression), else
    ``INCONCLUSIVE`` when a replay showed nothing (not a pass), else ``PASSED``."""
    if failures:
        return "FAILED"
    return "INCONCLUSIVE" if inconclusive else "PASSED"
