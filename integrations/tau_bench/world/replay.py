"""The world replay: re-execute a run's recorded tool calls against a private copy of the
database and our own tools, then compare every answer and the final database hash.

- The calls run in the recorded order (``ForensicsRun.calls``, paired with their answers by
  position, since ``tool_call_id`` is not unique), reads included: a write's effect can depend
  on what earlier writes did, and reads are the oracle that shows where the worlds part.
- Arguments are fresh copies per call (``ToolCallFact.arguments`` is parsed JSON; the world
  copies what it stores), so no call can change another call's arguments.
- A call mutated the database when the records it touched differ afterwards; a tool that
  refuses (``Error: ...``) changes nothing.
- ``expected_hash`` executes the ground-truth actions the same way: the benchmark's verdict on
  the writes is "same final database", so ``final_hash == expected_hash`` is the world state
  check ``compare_expected`` takes.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from integrations.tau_bench.forensics import ForensicsRun
from integrations.tau_bench.world.airline import AirlineTools
from integrations.tau_bench.world.common import DomainTools
from integrations.tau_bench.world.db import DomainData, World, to_hashable
from integrations.tau_bench.world.retail import RetailTools

__all__ = ["CallReplay", "WorldReplay", "expected_hash", "replay_run", "tools_for"]

TOOLS: dict[str, type[DomainTools]] = {"airline": AirlineTools, "retail": RetailTools}


def tools_for(world: World) -> DomainTools:
    return TOOLS[world.base.domain](world)


class CallReplay(BaseModel):
    """One re-executed call (message positions are 0-based indexes into the conversation)."""

    assistant_index: int
    tool_index: int | None
    name: str
    #: our output equals the recorded one (None: nothing was recorded for this call)
    reproduced: bool | None
    mutated: bool
    #: our output, kept only when it differs from the recorded one
    output: str | None = None
    recorded: str | None = None


class WorldReplay(BaseModel):
    run_id: str
    domain: str
    db_version: str
    initial_hash: str
    final_hash: str
    #: the final hash of executing the run's ground-truth actions (None: not computed)
    expected_hash: str | None = None
    calls: list[CallReplay]

    @property
    def n_compared(self) -> int:
        return sum(c.reproduced is not None for c in self.calls)

    @property
    def n_reproduced(self) -> int:
        return sum(c.reproduced is True for c in self.calls)

    @property
    def first_divergent_tool_index(self) -> int | None:
        """The first tool message whose recorded answer our world does not give."""
        return next((c.tool_index for c in self.calls if c.reproduced is False), None)

    @property
    def state_matches_expected(self) -> bool | None:
        return None if self.expected_hash is None else self.final_hash == self.expected_hash

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "domain": self.domain,
            "db_version": self.db_version,
            "initial_hash": self.initial_hash,
            "final_hash": self.final_hash,
            "expected_hash": self.expected_hash,
            "state_matches_expected": self.state_matches_expected,
            "tool_calls": len(self.calls),
            "outputs_compared": self.n_compared,
            "outputs_reproduced": self.n_reproduced,
            "mutating_calls": [c.tool_index for c in self.calls if c.mutated],
            "first_divergent_tool_message": self.first_divergent_tool_index,
        }


def _delta(world: World) -> Any:
    """The hashable form of the records this world has copied: enough to see a change."""
    return to_hashable(
        {t: {k: world.get(t, k) for k in keys} for t, keys in world.changed_keys.items()}
    )


def _execute(tools: DomainTools, name: str, arguments: Any) -> tuple[str, bool]:
    before = _delta(tools.world)
    output = tools.call(name, copy.deepcopy(arguments))
    return output, _delta(tools.world) != before


def replay_run(run: ForensicsRun, base: DomainData, with_expected: bool = True) -> WorldReplay:
    """Re-execute ``run``'s calls on a fresh copy of ``base``."""
    world = World(base)
    tools = tools_for(world)
    calls = []
    for call in run.calls:
        if call.arguments_invalid:
            output, mutated = "Error: the arguments are not a JSON object", False
        else:
            output, mutated = _execute(tools, call.name, call.arguments)
        reproduced = None if call.output is None else output == call.output
        calls.append(
            CallReplay(
                assistant_index=call.assistant_index,
                tool_index=call.tool_index,
                name=call.name,
                reproduced=reproduced,
                mutated=mutated,
                output=output if reproduced is False else None,
                recorded=call.output if reproduced is False else None,
            )
        )
    return WorldReplay(
        run_id=run.run_id,
        domain=run.domain,
        db_version=base.version,
        initial_hash=base.initial_hash,
        final_hash=world.hash(),
        expected_hash=expected_hash(run, base) if with_expected else None,
        calls=calls,
    )


def expected_hash(run: ForensicsRun, base: DomainData) -> str:
    """The final hash after the run's ground-truth actions, on a fresh copy of ``base``."""
    tools = tools_for(World(base))
    for action in run.expected_actions:
        tools.call(action.name, copy.deepcopy(action.arguments))
    return tools.world.hash()
