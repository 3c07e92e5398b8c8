"""Running an agent live and recording it (``replaybook agent run``), and the state of the
reference agent's simulated world (``replaybook examples providers``).

The deployment's agents and their worlds are parameters: the composition root
(``cli/agent.py``) takes them from ``worker/agents.py``; this module knows no agent."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from models import SideEffectRecord
from models.errors import InvalidInputError
from runtime.executor import RunResult
from runtime.ports import ArtifactStore, EventLedger
from stores.bundle import Stores


class AgentRunner(Protocol):
    """Records one live run of an agent's ``scenario`` against its (simulated) providers."""

    def __call__(
        self,
        ledger: EventLedger,
        artifacts: ArtifactStore,
        scenario: str,
        *,
        prompt: str,
        seed: int,
        model: str | None = None,
    ) -> Awaitable[RunResult]: ...


class InspectableWorld(Protocol):
    """A simulated world that can say what its providers hold."""

    async def ensure(self) -> None: ...

    async def state(self) -> dict[str, Any]: ...


async def run_agent(
    stores: Stores,
    runners: Mapping[str, AgentRunner],
    agent: str,
    *,
    scenario: str,
    prompt: str,
    seed: int,
    model: str | None = None,
) -> dict[str, Any]:
    """Record one live run of ``agent`` (one of ``runners``, by graph id) on ``scenario``
    decided by ``model`` (a registered model; ``None``: the agent's scripted one); the view of
    the recorded run: status, outcome, steps, events and side effects."""
    runner = runners.get(agent)
    if runner is None:
        raise InvalidInputError(f"unknown agent {agent!r} (known: {', '.join(runners)})")
    result = await runner(
        stores.ledger, stores.artifacts, scenario, prompt=prompt, seed=seed, model=model
    )
    run = await stores.ledger.get_run(result.run_id)
    effects: list[SideEffectRecord] = await stores.evidence.records(SideEffectRecord, result.run_id)
    verification = await stores.ledger.verify(result.run_id)
    return {
        "run_id": result.run_id,
        "agent": agent,
        "scenario": scenario,
        "prompt": prompt,
        "seed": seed,
        "model": model,
        "model_profile": run.pinned.model_profile,
        "status": result.status.value,
        "outcome": result.outcome,
        "steps": result.steps,
        "event_count": verification.event_count,
        "side_effects": [
            {"id": e.side_effect_id, "capability": e.capability_id, "status": e.status.value}
            for e in effects
        ],
    }


async def world_state(world: InspectableWorld) -> dict[str, Any]:
    """What the simulated providers hold: customers, refunds (with provider request ids and
    counts per order), emails sent (with recipients), calls per operation."""
    await world.ensure()
    return await world.state()
