"""The regression gate: replay every active incident case with a candidate (fixtures frozen,
writes blocked) and check its structural assertions. Used by ``replaybook regress`` and by
``regression_gate`` for a project's own pytest suite."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.replays import new_replay_id
from models import FixtureMissPolicy
from models.errors import InvalidInputError
from models.queues import CONTROL_QUEUE
from models.regression import RegressionCase, evaluate_case
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from models.replay_plans import PlanFields, plan_for_candidates
from runtime.trajectory import load_trajectory
from runtime.verification import require_verified
from stores.sql.incidents import SqlIncidentStore

if TYPE_CHECKING:
    from temporalio.client import Client

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


async def run_gate(
    client: Client,
    stores: Stores,
    candidates: Sequence[tuple[str, str]],
    *,
    repeat: int = 5,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
) -> dict[str, Any]:
    """Every active case, ``repeat`` times each: a case holds only if every replay holds."""
    if repeat < 1:
        raise InvalidInputError("--repeat must be at least 1", field="--repeat")
    cases = await SqlIncidentStore(stores.db).active_cases()
    # a case whose source run does not verify gates nothing: refuse rather than replay it
    for case in cases:
        await require_verified(
            stores.ledger, case.source_run_id, to=f"gate on regression case {case.case_id}"
        )
    results = [await _gate_case(client, stores, case, candidates, repeat, miss) for case in cases]
    return {
        "candidate": {k: v for k, v in candidates},
        "passed": all(r["passed"] for r in results),
        "cases": results,
    }


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
        candidate_plan(case.source_run_id, candidates, miss, seed)
        for seed in range(1, repeat + 1)
    ]
    await asyncio.gather(
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
    for plan in plans:
        trajectory = await load_trajectory(stores.ledger, plan.replay_id)
        failures.extend(
            {"replay_id": plan.replay_id, "assertion": f.assertion, "reason": f.reason}
            for f in evaluate_case(case, trajectory).failures
        )
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "passed": not failures,
        "replays": [p.replay_id for p in plans],
        "failures": failures,
    }
