"""Imported tau-bench runs come alive in replay (issue 18, item 6).

During an ``exact`` / ``model-swap`` replay under the ``sandbox-live`` fixture-miss policy, a
READ tool call the source did not record is answered by our world tools on a private copy of
the database version the run was recorded against (``TauWorlds.read_providers``). The private
copy is rebuilt for each answer: the shared base plus, in order, the writes the replay asked
for so far (its ``WRITE_BLOCKED`` events; the tools are deterministic). Nothing is ever written
to the base: ``World`` copies a record before changing it.

At comparison time ``replay_counterfactual`` gives the benchmark's verdict on the replayed
conversation (``counterfactual_verdict``): reward 0/1 with the reason.

Where the databases are: ``REPLAYBOOK_TAU_BENCH_DATA`` (an ``env-data`` folder,
``<version>/<domain>/*.json``); unset, the copy packed with the repository's test data.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from integrations.tau_bench.world.airline import AirlineTools
from integrations.tau_bench.world.counterfactual import (
    CounterfactualVerdict,
    counterfactual_verdict,
)
from integrations.tau_bench.world.db import DomainData, World, load_domain
from integrations.tau_bench.world.replay import _execute, tools_for
from integrations.tau_bench.world.retail import RetailTools
from models import ExecutionEventType
from models.errors import InvalidInputError
from runtime.ports import ArtifactStore, CounterfactualEvaluator, EventLedger
from runtime.tools import ToolCallContext, ToolProvider

__all__ = ["TauWorlds", "default_env_data", "replay_counterfactual", "world_tool_names"]

E = ExecutionEventType


def default_env_data() -> Path:
    """The benchmark's databases packed with the repository (``tests/data/testdata.tar.xz``,
    unpacked once into the temporary directory)."""
    from tests.testdata import unpacked_testdata

    return unpacked_testdata() / "tau-bench" / "env-data"


def world_tool_names() -> tuple[str, ...]:
    """Every tool our world implements, in both domains."""
    names = {
        n[len("tool_") :]
        for cls in (AirlineTools, RetailTools)
        for n in dir(cls)
        if n.startswith("tool_")
    }
    return tuple(sorted(names))


class _Source:
    """What a replay needs of its imported source run: domain, version, write tools."""

    def __init__(self, imported: Any, run: Any) -> None:
        self.imported = imported
        self.run = run  # the ForensicsRun (expected actions and outputs)


class TauWorlds:
    """The private worlds of replays of imported tau-bench runs, served from the worker."""

    def __init__(
        self, ledger: EventLedger, artifacts: ArtifactStore, evidence: Any, env_data: Path | None
    ) -> None:
        self.ledger, self.artifacts, self.evidence = ledger, artifacts, evidence
        self.env_data = env_data
        self._bases: dict[tuple[str, str], DomainData] = {}
        self._sources: dict[str, _Source] = {}

    def base(self, version: str, domain: str) -> DomainData:
        key = (version, domain)
        if key not in self._bases:
            self._bases[key] = load_domain(self.env_data or default_env_data(), version, domain)
        return self._bases[key]

    async def source(self, source_run_id: str) -> _Source:
        if source_run_id not in self._sources:
            from integrations.tau_bench.imported import forensics_run_from_imported
            from integrations.tau_bench.importer import load_tau_run

            imported = await load_tau_run(self.ledger, self.artifacts, self.evidence, source_run_id)
            run = forensics_run_from_imported(imported, source_run_id)
            if not run.env_version:
                raise InvalidInputError(
                    f"run {source_run_id!r}: its database version (env_version) was not imported"
                )
            self._sources[source_run_id] = _Source(imported, run)
        return self._sources[source_run_id]

    async def private_world(self, replay_id: str) -> tuple[World, _Source]:
        """A fresh private copy with the replay's writes so far applied, in order."""
        header = await self.ledger.get_run(replay_id)
        source = await self.source(header.labels["source_run_id"])
        world = World(self.base(str(source.run.env_version), source.run.domain))
        tools = tools_for(world)
        blocked = await self.ledger.events_with_payloads(
            replay_id, types=frozenset({E.WRITE_BLOCKED}), missing_ok=True
        )
        for _, payload in blocked:
            data = json.loads(payload or b"{}")
            tools.call(str(data.get("capability_id")), copy.deepcopy(data.get("arguments") or {}))
        return world, source

    async def read_providers(self) -> Mapping[str, ToolProvider]:
        return {name: self._reader(name) for name in world_tool_names()}

    def _reader(self, name: str) -> ToolProvider:
        async def read(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
            world, source = await self.private_world(context.run_id)
            if name in source.run.write_tools:
                raise InvalidInputError(f"{name} is a WRITE tool: never read live")
            output, mutated = _execute(tools_for(world), name, arguments)
            if mutated:  # a READ that changed the copy: the copy is discarded anyway
                raise InvalidInputError(f"{name} changed the database: not a READ tool")
            return {"output": output}

        return read


def _messages(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The loop state's conversation as OpenAI chat messages (tool-call arguments as text)."""
    out: list[dict[str, Any]] = []
    for m in state.get("messages") or ():
        message: dict[str, Any] = {"role": m.get("role"), "content": m.get("content")}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {
                        "name": c.get("name"),
                        "arguments": json.dumps(c.get("arguments") or {}),
                    },
                }
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            message["tool_call_id"] = m["tool_call_id"]
        out.append(message)
    return out


async def replay_counterfactual(
    worlds: TauWorlds, replay_id: str, source_run_id: str
) -> CounterfactualVerdict | None:
    """The benchmark's verdict on the replay's conversation (its last checkpointed loop state);
    None when the source is not an imported tau-bench run."""
    header = await worlds.ledger.get_run(source_run_id)
    if header.labels.get("source") != "tau-bench":
        return None
    source = await worlds.source(source_run_id)
    loaded = await worlds.ledger.events_with_payloads(
        replay_id, types=frozenset({E.STEP_COMPLETED, E.RUN_FAILED}), missing_ok=True
    )
    state: dict[str, Any] = {}
    for event, payload in reversed(loaded):
        ref = (json.loads(payload or b"{}").get("replay_step") or {}).get("state_ref")
        if event.type is E.STEP_COMPLETED and ref:
            state = json.loads(await worlds.artifacts.get(ref))
            break
    # why the replay's steps stopped before the episode's end (its budget, a fixture miss…)
    stopped = next(
        (
            str(data.get("message") or data.get("error"))
            for data in (json.loads(p or b"{}") for e, p in loaded if e.type is E.RUN_FAILED)
            if data.get("partial")
        ),
        None,
    )
    base = worlds.base(str(source.run.env_version), source.run.domain)
    return counterfactual_verdict(source.run, _messages(state), base, stopped=stopped)


def tau_counterfactual(worlds: TauWorlds) -> CounterfactualEvaluator:
    """The benchmark's verdict as the replay activities take it (the worker injects it)."""

    async def evaluate(replay_id: str, source_run_id: str) -> CounterfactualVerdict | None:
        return await replay_counterfactual(worlds, replay_id, source_run_id)

    return evaluate
