"""The agents this deployment knows, by graph id: how to build their tool providers."""

from __future__ import annotations

from collections.abc import Mapping

from examples.support_desk.agent import GRAPH_ID as SUPPORT_DESK
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.reconcilers import support_desk_reconcilers
from examples.support_desk.spec import support_desk_spec
from forensics.reconcile import SideEffectReconciler
from models.errors import InvalidInputError
from runtime.tools import ToolProvider
from stores.sql.database import Database

KNOWN_AGENTS = (SUPPORT_DESK,)


async def tool_providers_for(graph_id: str, db: Database) -> Mapping[str, ToolProvider]:
    """The live tool providers of an agent (used to retry a write proved not applied)."""
    if graph_id == SUPPORT_DESK:
        world = SimulatedWorld(db)
        await world.ensure()
        return support_desk_spec(world).tool_providers
    raise InvalidInputError(
        f"no tool providers are configured for agent {graph_id!r} (known: {', '.join(KNOWN_AGENTS)})"
    )


def reconcilers_for(graph_id: str, db: Database) -> list[SideEffectReconciler]:
    """The read-only reconcilers of an agent's providers; none means a human decides."""
    if graph_id == SUPPORT_DESK:
        return support_desk_reconcilers(SimulatedWorld(db))
    return []
