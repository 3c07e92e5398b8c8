"""Running an incident capsule's regression case with a candidate, with no service at all: the
capsule's evidence goes into a throw-away store (a SQLite file and a directory under a temporary
directory), and the real ``ReplayEngine`` replays it in this process (``app.local_replay``, the
steps the ``Replay`` workflow runs as activities). The verdicts are the gate's: each replay's as
the workflow gives it, the case's by ``app.regression.case_verdict``."""

from __future__ import annotations

import dataclasses
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.capsules import OpenedCapsule, import_capsule
from app.local_replay import run_prepared
from app.regression import candidate_plan, case_verdict, gated_graphs
from models import FixtureMissPolicy
from models.comparison import compare_trajectories, reproduces
from models.errors import InvalidInputError, ReplaybookError
from models.regression import evaluate_case
from models.replay_flow import ReplayPlan
from models.verdicts import Verdict, failure_verdict, stop_verdict
from runtime.replay.catalog import AgentCatalog
from runtime.replay.engine import ReplayEngine
from runtime.tools import ToolCallContext, ToolProvider, request_hash
from runtime.trajectory import load_trajectory
from stores.bundle import Stores, open_stores
from stores.config import ArtifactSettings, DatabaseSettings, StoreSettings

#: seeds are drawn from this range (``--seeds`` replays a gate run with the same ones)
_SEED_RANGE = 1_000_000


def capsule_store_settings(workdir: Path) -> StoreSettings:
    """A store that needs no service: SQLite and a local directory under ``workdir``."""
    return StoreSettings(
        home=workdir,
        database=DatabaseSettings.model_validate({"url": f"sqlite:///{workdir / 'capsule.db'}"}),
        artifacts=ArtifactSettings.model_validate({"location": str(workdir / "artifacts")}),
    )


def offline_catalog(catalog: AgentCatalog, capsule: OpenedCapsule) -> AgentCatalog:
    """``catalog`` whose live READ answers come from the capsule (what the incident's replays
    were answered live), never from a world: a request none of them made is a fixture miss."""
    answers = {a["request_hash"]: a for a in capsule.live_answers()}
    capabilities = {a["capability_id"] for a in answers.values()}

    def provider(capability_id: str) -> ToolProvider:
        async def answer(arguments: Mapping[str, Any], context: ToolCallContext) -> Any:
            found = answers.get(request_hash(capability_id, arguments))
            if found is None:
                from models.errors import FixtureMissError

                raise FixtureMissError(
                    f"no recorded or capsule live answer for {capability_id} "
                    f"{dict(arguments)} (offline: no world to ask)",
                    capability_id=capability_id,
                )
            return found["response"]

        return answer

    async def read_providers() -> Mapping[str, ToolProvider]:
        return {c: provider(c) for c in sorted(capabilities)}

    return dataclasses.replace(catalog, read_providers=read_providers)


def draw_seeds(repeat: int, seeds: Sequence[int] = ()) -> list[int]:
    """``seeds`` when given (``repeat`` of them), else ``repeat`` fresh ones."""
    if repeat < 1:
        raise InvalidInputError("--repeat must be at least 1", field="--repeat")
    if seeds:
        if len(seeds) != repeat:
            raise InvalidInputError(
                f"--seeds names {len(seeds)} seeds for --repeat {repeat}", field="--seeds"
            )
        return list(seeds)
    return [secrets.randbelow(_SEED_RANGE) + 1 for _ in range(repeat)]


async def run_capsule(
    capsule: OpenedCapsule,
    candidates: Sequence[tuple[str, str]],
    catalogs: Mapping[str, AgentCatalog],
    *,
    repeat: int = 5,
    seeds: Sequence[int] = (),
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The gate's result for the capsule's case (the shape ``regress --json`` gives per case,
    plus ``seeds`` and ``offline``). The chain is checked again in the throw-away store."""
    graph = capsule.manifest.graph_id
    if graph not in catalogs:
        raise InvalidInputError(
            f"the capsule's agent {graph!r} is not one this installation replays "
            f"(known: {', '.join(sorted(catalogs))})",
            field="capsule",
        )
    gated_graphs(catalogs, candidates, [graph])  # an unknown candidate: bad input, before work
    drawn = draw_seeds(repeat, seeds)
    with tempfile.TemporaryDirectory(prefix="rbcase-", dir=workdir) as tmp:
        async with open_stores(capsule_store_settings(Path(tmp))) as stores:
            run_id = await import_capsule(stores, capsule, with_case=False)
            engine = ReplayEngine(
                stores.ledger,
                stores.evidence,
                stores.artifacts,
                {graph: offline_catalog(catalogs[graph], capsule)},
            )
            plans = [candidate_plan(run_id, candidates, miss, seed) for seed in drawn]
            replays = [await _replay(engine, stores, capsule, plan) for plan in plans]
    failures = [f for r in replays for f in r["failures"]]
    inconclusive = [r["inconclusive"] for r in replays if r["inconclusive"]]
    case = capsule.case
    verdict = case_verdict(failures, inconclusive)
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "candidate": dict(candidates),
        "verdict": verdict,
        "passed": verdict == "PASSED",
        "replays": [p.replay_id for p in plans],
        "seeds": drawn,
        "failures": failures,
        "inconclusive": inconclusive,
        "verdicts": [r["verdict"] for r in replays],
        "offline": True,
    }


async def _replay(
    engine: ReplayEngine, stores: Stores, capsule: OpenedCapsule, plan: ReplayPlan
) -> dict[str, Any]:
    """One replay as the workflow runs it (prepare, steps, compare) and its verdict; the
    case's assertions checked on it when it is conclusive."""
    verdict = await _replay_verdict(engine, stores, plan)
    out: dict[str, Any] = {"verdict": verdict.verdict.value, "failures": [], "inconclusive": None}
    if not verdict.conclusive:
        out["inconclusive"] = {
            "replay_id": plan.replay_id,
            "inconclusive_reason": verdict.inconclusive_reason.value
            if verdict.inconclusive_reason
            else None,
            "reason": verdict.reason,
        }
        return out
    trajectory = await load_trajectory(stores.ledger, plan.replay_id)
    out["failures"] = [
        {"replay_id": plan.replay_id, "assertion": f.assertion, "reason": f.reason}
        for f in evaluate_case(capsule.case, trajectory).failures
    ]
    return out


async def _replay_verdict(engine: ReplayEngine, stores: Stores, plan: ReplayPlan) -> Verdict:
    prepared = await engine.prepare(plan)
    if not prepared.ok:
        return failure_verdict(None, "; ".join(prepared.problems), preparing=True)
    try:
        totals = await run_prepared(engine, plan, prepared)
    except ReplaybookError as exc:  # what fails a step activity for good in the workflow
        return failure_verdict(type(exc).__name__, f"step failed: {exc}")
    source = await load_trajectory(stores.ledger, plan.source_run_id)
    replay = await load_trajectory(stores.ledger, plan.replay_id)
    return stop_verdict(totals.stopped, reproduces(compare_trajectories(source, replay)))
