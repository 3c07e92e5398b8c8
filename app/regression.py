"""The regression gate: replay every active incident case with a candidate (fixtures frozen,
writes blocked) and check its structural assertions. Used by ``replaybook regress`` and by
``regression_gate`` for a project's own pytest suite."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

from models import FixtureMissPolicy, ReplayMode
from models.errors import InvalidInputError
from models.queues import CONTROL_QUEUE
from models.regression import evaluate_case
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from stores.bundle import open_stores
from stores.sql.incidents import SqlIncidentStore
from stores.sql.trajectory import load_trajectory
from worker.settings import Settings

CANDIDATE_KINDS = ("prompt", "model", "policy", "retriever")


def candidate_plan(
    case_run_id: str, candidates: Sequence[tuple[str, str]], miss: FixtureMissPolicy, seed: int
) -> ReplayPlan:
    values = dict(candidates)
    unknown = set(values) - set(CANDIDATE_KINDS)
    if unknown:
        raise InvalidInputError(
            f"--candidate {sorted(unknown)[0]}=…: not supported (use {', '.join(CANDIDATE_KINDS)})"
        )
    mode = (
        ReplayMode.PROMPT_SWAP
        if "prompt" in values
        else ReplayMode.MODEL_SWAP
        if "model" in values
        else ReplayMode.EXACT
    )
    return ReplayPlan(
        replay_id=f"regress-{uuid.uuid4().hex[:12]}",
        source_run_id=case_run_id,
        mode=mode,
        prompt_version=values.get("prompt"),
        model_name=values.get("model"),
        policy_version=values.get("policy"),
        retriever_version=values.get("retriever"),
        miss_policy=miss,
        sampling_seed=seed,
    )


async def run_gate(
    settings: Settings,
    candidates: Sequence[tuple[str, str]],
    *,
    repeat: int = 5,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
) -> dict[str, Any]:
    """Every active case, ``repeat`` times each: a case holds only if every replay holds."""
    from worker.temporal import connect
    from workflows.replay import ReplayWorkflow

    if repeat < 1:
        raise InvalidInputError("--repeat must be at least 1")
    client = await connect(settings)
    async with open_stores(settings) as stores:
        cases = await SqlIncidentStore(stores.db).active_cases()
        results = []
        for case in cases:
            plans = [
                candidate_plan(case.source_run_id, candidates, miss, seed)
                for seed in range(1, repeat + 1)
            ]
            outcomes: list[ReplayOutcome] = await asyncio.gather(
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
            for plan, _outcome in zip(plans, outcomes, strict=True):
                trajectory = await load_trajectory(stores.ledger, plan.replay_id)
                result = evaluate_case(case, trajectory)
                for failure in result.failures:
                    failures.append(
                        {
                            "replay_id": plan.replay_id,
                            "assertion": failure.assertion,
                            "reason": failure.reason,
                        }
                    )
            results.append(
                {
                    "case_id": case.case_id,
                    "incident_id": case.incident_id,
                    "source_run_id": case.source_run_id,
                    "passed": not failures,
                    "replays": [p.replay_id for p in plans],
                    "failures": failures,
                }
            )
    return {
        "candidate": {k: v for k, v in candidates},
        "passed": all(r["passed"] for r in results),
        "cases": results,
    }
