"""Benchmark: real local models in the loop.
``.venv/bin/python -m bench.models [--replays N] [--tau-replays N] [--json]``.

Starts the local model server (``devstack.model_server``, both models) on a free port and an
SQLite store in a temporary directory, then measures, all in the same run:

* tokens/s of each model: a direct chat completion (64 tokens at most, temperature 0.8);
* replays/min of a 5-step support-desk replay (``wrong-customer``, MODEL_SWAP to each model,
  the engine in this process: Temporal and the sandbox are measured by ``bench.bench_replay``);
* the overhead Replaybook adds per model call in that replay (recording the prompt, the context
  snapshot and the call, hashing, the budget) against the time spent inside the server's
  answers, and a direct call of the same decision as the baseline.

* replays/min of a tau-bench replay through the tool loop (the shortest scored airline
  conversation of the packed test data, MODEL_SWAP to gemma3-270m, ``sandbox-live``, the
  replay's default cap of model calls), with each replay's counterfactual reward and reason
  (``--tau-replays N``, 0 to leave it out: one replay takes minutes on two cores).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from app.local_replay import run_prepared
from devstack.components import dev_dir
from devstack.model_server import launch_model_server
from devstack.ports import free_ports
from devstack.processes import terminate
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.real_model import SupportDeskJsonModel
from examples.support_desk.spec import run_scenario
from models import FixtureMissPolicy, ReplayMode
from models.model_call import ChatMessage, ModelRequest, ModelResponse
from models.replay_flow import ReplayPlan
from runtime.providers.registry import LOCAL_MODELS, ModelRegistrySettings
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.catalogs import catalogs
from worker.settings import Settings

#: replays per model (``--replays N``)
REPLAYS = 3
#: tau-bench replays (``--tau-replays N``) and the model they swap in
TAU_REPLAYS = 1
TAU_MODEL = "gemma3-270m"
PROMPT = "Explain in three sentences why a support agent should identify customers by id."


class Timed:
    """A provider that adds up the time spent inside its inner provider's answers."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.profile, self.seconds, self.calls = inner, inner.profile, 0.0, 0

    async def complete(self, request: ModelRequest, **kw: Any) -> ModelResponse:
        started = time.perf_counter()
        try:
            return await self.inner.complete(request, **kw)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


async def tokens_per_second(registry: ModelRegistrySettings, name: str) -> float:
    provider = registry.provider(name)
    try:
        request = ModelRequest(
            model=name,
            messages=(ChatMessage(role="user", content=PROMPT),),
            max_tokens=64,
            temperature=0.8,
            seed=1,
        )
        await provider.complete(request)  # load the model (the server switches on demand)
        tokens, seconds = 0, 0.0
        for seed in range(3):
            started = time.perf_counter()
            answer = await provider.complete(request.model_copy(update={"seed": seed}))
            seconds += time.perf_counter() - started
            tokens += answer.usage.completion_tokens
        return tokens / seconds
    finally:
        await provider.aclose()


async def replay_rate(
    settings: Settings, world: SimulatedWorld, name: str, replays: int
) -> dict[str, Any]:
    registry = settings.model_registry
    async with open_stores(settings.stores) as stores:
        provider = registry.provider(name)
        source = await run_scenario(
            world,
            stores.ledger,
            stores.artifacts,
            "wrong-customer",
            seed=1,
            model=SupportDeskJsonModel(name, provider),
            model_name=name,
        )
        await provider.aclose()
        cats = dict(catalogs(world.store, None, registry))
        desk = cats["support-desk"]
        timed = Timed(desk.models[name].inner)  # type: ignore[attr-defined]
        desk.models = {**desk.models, name: SupportDeskJsonModel(name, timed)}
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, cats)
        started = time.perf_counter()
        steps = calls = 0
        for seed in range(replays):
            plan = ReplayPlan(
                replay_id=f"bench-{uuid.uuid4().hex[:10]}",
                source_run_id=source.run_id,
                mode=ReplayMode.MODEL_SWAP,
                model_name=name,
                sampling_seed=seed,
            )
            totals = await run_prepared(engine, plan, await engine.prepare(plan))
            steps, calls = steps + totals.steps, calls + totals.model_calls
        wall = time.perf_counter() - started
        # the baseline: the same decision asked directly, once per call the replays made
        direct = Timed(timed.inner)
        planner = SupportDeskJsonModel(name, direct)
        request = _planner_request(name)
        for seed in range(max(calls, 1)):
            await planner.complete(request.model_copy(update={"seed": seed}))
    return {
        "replays_per_min": round(replays / wall * 60, 2),
        "steps_per_replay": steps / replays,
        "model_calls": calls,
        "model_seconds_per_call": round(timed.seconds / max(timed.calls, 1), 3),
        "direct_seconds_per_call": round(direct.seconds / max(direct.calls, 1), 3),
        "overhead_ms_per_call": round((wall - timed.seconds) / max(calls, 1) * 1000, 1),
    }


async def tau_replay_rate(settings: Settings, replays: int) -> dict[str, Any]:
    """MODEL_SWAP replays of the shortest scored airline conversation to ``TAU_MODEL``, each
    with its own seed, tool calls the recording lacks answered on a private copy of the
    database the run was recorded against; the benchmark's verdict of each."""
    from integrations.tau_bench.world.live import TauWorlds, replay_counterfactual
    from tests.fixtures_tau import ENV_DATA, import_shortest_airline_run

    async with open_stores(settings.stores) as stores:
        with tempfile.TemporaryDirectory() as folder:
            run_id = await import_shortest_airline_run(stores, Path(folder))
        worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
        cats = catalogs(None, None, settings.model_registry, worlds)
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, cats)
        started = time.perf_counter()
        calls = tokens = 0
        verdicts = []
        for seed in range(replays):
            plan = ReplayPlan(
                replay_id=f"bench-{uuid.uuid4().hex[:10]}",
                source_run_id=run_id,
                mode=ReplayMode.MODEL_SWAP,
                model_name=TAU_MODEL,
                sampling_seed=seed,
                miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
            )
            totals = await run_prepared(engine, plan, await engine.prepare(plan))
            calls, tokens = calls + totals.model_calls, tokens + totals.usage.tokens
            verdict = await replay_counterfactual(worlds, plan.replay_id, run_id)
            verdicts.append(
                None
                if verdict is None
                else {"reward": verdict.counterfactual_reward, "reason": verdict.reason}
            )
        for catalog in cats.values():
            for model in catalog.models.values():
                close = getattr(getattr(model, "inner", model), "aclose", None)
                if close is not None:
                    await close()
        wall = time.perf_counter() - started
    return {
        "model": TAU_MODEL,
        "replays_per_min": round(replays / wall * 60, 3),
        "seconds_per_replay": round(wall / replays, 1),
        "model_calls": calls,
        "tokens": tokens,
        "verdicts": verdicts,
    }


def _planner_request(name: str) -> ModelRequest:
    from examples.support_desk.agent import INJECTIONS, PROMPTS, SCENARIOS
    from runtime.prompts import compile_prompt

    system = compile_prompt(PROMPTS["v17"].template("planner"), INJECTIONS)
    ticket = json.dumps(SCENARIOS["wrong-customer"], sort_keys=True)
    return ModelRequest(
        model=name,
        messages=(
            ChatMessage(role="system", content=system),
            ChatMessage(role="user", content=ticket),
        ),
    )


async def run(replays: int = REPLAYS, tau_replays: int = TAU_REPLAYS) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        dev_dir(home).mkdir(parents=True)
        server = launch_model_server(home, free_ports(1)[0], {"PATH": "/usr/bin:/bin"})
        try:
            settings = Settings.from_env(
                {
                    "REPLAYBOOK_HOME": str(home),
                    "REPLAYBOOK_LOCAL_MODELS_URL": server["base_url"],
                    "REPLAYBOOK_LOG_FORMAT": "json",
                }
            )
            world = SimulatedWorld(SqlWorldStore.beside(settings.stores.database_url))
            await world.ensure()
            out: dict[str, Any] = {}
            for name in LOCAL_MODELS:
                # each figure on stderr as soon as it is measured (a loaded machine is slow)
                speed = round(await tokens_per_second(settings.model_registry, name), 1)
                print(f"{name}: {speed} tokens/s", file=sys.stderr, flush=True)
                rate = await replay_rate(settings, world, name, replays)
                print(f"{name}: {json.dumps(rate)}", file=sys.stderr, flush=True)
                out[name] = {"tokens_per_s": speed, **rate}
            if tau_replays > 0:
                out["tau-bench"] = await tau_replay_rate(settings, tau_replays)
                print(f"tau-bench: {json.dumps(out['tau-bench'])}", file=sys.stderr, flush=True)
            return out
        finally:
            terminate(server["pid"], server["pid_start"], timeout=10)


def main() -> dict[str, Any]:
    args = sys.argv[1:]
    replays = int(args[args.index("--replays") + 1]) if "--replays" in args else REPLAYS
    tau = int(args[args.index("--tau-replays") + 1]) if "--tau-replays" in args else TAU_REPLAYS
    results = asyncio.run(run(replays, tau))
    if "--json" in sys.argv[1:]:
        print(json.dumps(results, indent=2))
        return results
    print("local models (llama_cpp.server, 2 threads; the machine's load counts)")
    tau_row = results.get("tau-bench")
    for name, r in results.items():
        if r is tau_row:
            continue
        print(
            f"  {name:<14} {r['tokens_per_s']:>6.1f} tokens/s  "
            f"{r['replays_per_min']:>6.2f} replays/min ({r['steps_per_replay']:.0f}-step "
            f"support-desk MODEL_SWAP, {r['model_calls']} calls)  "
            f"per call: model {r['model_seconds_per_call']:.2f} s, direct "
            f"{r['direct_seconds_per_call']:.2f} s, Replaybook overhead "
            f"{r['overhead_ms_per_call']:.0f} ms"
        )
    if tau_row is not None:
        rewards = ", ".join(
            "not scored" if v is None else f"{v['reward']} ({v['reason']})"
            for v in tau_row["verdicts"]
        )
        print(
            f"  tau-bench      {tau_row['replays_per_min']:>6.3f} replays/min "
            f"({tau_row['seconds_per_replay']:.0f} s each, MODEL_SWAP to {tau_row['model']}, "
            f"sandbox-live, {tau_row['model_calls']} calls, {tau_row['tokens']} tokens); "
            f"counterfactual rewards: {rewards}"
        )
    return results


if __name__ == "__main__":
    main()
