"""Running an incident capsule's regression case with a candidate, with no service at all: the
capsule's evidence goes into a throw-away store (a SQLite file and a directory under a temporary
directory), and the real ``ReplayEngine`` replays it in this process (``app.local_replay``, the
steps the ``Replay`` workflow runs as activities). The verdicts are the gate's: each replay's as
the workflow gives it, the case's as ``regress`` decides it (``models.gate_power``)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from app.candidates import store_candidates
from app.capsules import OpenedCapsule, import_capsule
from app.local_replay import run_prepared
from app.regression import GateRepeats, candidate_plan, gated_graphs
from models import FixtureMissPolicy
from models.comparison import compare_trajectories, reproduces
from models.errors import InvalidInputError, ReplaybookError
from models.gate_power import gate_verdict, repeats_to_decide
from models.regression import evaluate_case
from models.replay_flow import ReplayPlan
from models.statistics import wilson_interval
from models.verdicts import Verdict, failure_verdict, stop_verdict
from runtime.replay.catalog import AgentCatalog
from runtime.replay.engine import ReplayEngine
from runtime.tools import ToolCallContext, ToolProvider, request_hash
from runtime.trajectory import load_trajectory
from stores.bundle import Stores, open_stores
from stores.config import ArtifactSettings, DatabaseSettings, StoreSettings


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


async def run_capsule(
    capsule: OpenedCapsule,
    candidates: Sequence[tuple[str, str]],
    catalogs: Mapping[str, AgentCatalog],
    *,
    repeat: int | GateRepeats = 5,
    miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE,
    candidate_texts: Mapping[str, str] | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The gate's result for the capsule's case (the shape ``regress --json`` gives per case,
    plus ``verdicts`` and ``offline``): ``repeat`` as ``regress`` takes it (a count, or
    ``GateRepeats`` for ``--repeat auto``, ``--seeds``, ``--threshold``), decided against the
    capsule's threshold unless one is given. ``candidate_texts``: a system prompt or tool
    catalogue (``app.candidates.read_candidates``), stored in the throw-away store and swapped
    in by digest. The chain is checked again in the throw-away store."""
    graph = capsule.manifest.graph_id
    if graph not in catalogs:
        raise InvalidInputError(
            f"the capsule's agent {graph!r} is not one this installation replays "
            f"(known: {', '.join(sorted(catalogs))})",
            field="capsule",
        )
    repeats = repeat if isinstance(repeat, GateRepeats) else GateRepeats(count=repeat)
    repeats.check()
    threshold = capsule.manifest.threshold if repeats.threshold is None else repeats.threshold
    seeds = repeats.draw(repeats.per_case(threshold))
    with tempfile.TemporaryDirectory(prefix="rbcase-", dir=workdir) as tmp:
        async with open_stores(capsule_store_settings(Path(tmp))) as stores:
            texts = candidate_texts or {}
            stored = await store_candidates(
                stores.artifacts,
                system_prompt=texts.get("system_prompt"),
                tools=texts.get("tools"),
            )
            pairs = [*candidates, *stored.items()]
            # an unknown candidate is bad input, before any replay
            gated_graphs(catalogs, pairs, [graph])
            run_id = await import_capsule(stores, capsule, with_case=False)
            engine = ReplayEngine(
                stores.ledger,
                stores.evidence,
                stores.artifacts,
                {graph: offline_catalog(catalogs[graph], capsule)},
            )
            plans = [candidate_plan(run_id, pairs, miss, seed) for seed in seeds]
            replays = [await _replay(engine, stores, capsule, plan) for plan in plans]
    return _decided(capsule, pairs, plans, seeds, replays, repeats.threshold)


def _decided(
    capsule: OpenedCapsule,
    candidates: Sequence[tuple[str, str]],
    plans: Sequence[ReplayPlan],
    seeds: Sequence[int],
    replays: Sequence[dict[str, Any]],
    threshold: float | None,
) -> dict[str, Any]:
    """The case decided as ``regress`` decides it (``models.gate_power``) against the threshold
    the capsule carries (or ``threshold``), in the shape of one case of ``regress --json``."""
    failures = [f for r in replays for f in r["failures"]]
    inconclusive = [r["inconclusive"] for r in replays if r["inconclusive"]]
    if threshold is None:
        threshold, source = capsule.manifest.threshold, capsule.manifest.threshold_source
    else:
        source = "--threshold"
    conclusive = len(replays) - len(inconclusive)
    reproduced = len({f["replay_id"] for f in failures})
    verdict = gate_verdict(reproduced, conclusive, threshold)  # as regress decides
    low, high = wilson_interval(reproduced, conclusive)
    case = capsule.case
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "candidate": dict(candidates),
        "verdict": verdict,
        "passed": verdict == "PASSED",
        "reproduced": reproduced,
        "conclusive": conclusive,
        "ci95": [round(low, 4), round(high, 4)],
        "threshold": round(threshold, 4),
        "threshold_source": source,
        "repeats_to_decide": None
        if verdict != "INCONCLUSIVE"
        else repeats_to_decide(reproduced, conclusive, threshold),
        "seeds": list(seeds),
        "replays": [p.replay_id for p in plans],
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
