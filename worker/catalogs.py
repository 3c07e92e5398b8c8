"""The agents whose code this deployment can replay, by graph id.

A module of its own (light to import) because every sandboxed replay step imports it in a
fresh process; there it is called with no world (the broker serves what needs one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from examples.coding_agent import GRAPH_ID as CODING_AGENT
from examples.coding_agent import coding_catalog
from examples.support_desk.agent import GRAPH_ID as SUPPORT_DESK
from examples.support_desk.catalog import support_desk_catalog
from examples.synthetic import GRAPH_ID as SYNTHETIC
from examples.synthetic import synthetic_catalog
from models.ingest import TOOL_LOOP_GRAPH_ID
from runtime.replay.catalog import AgentCatalog
from runtime.tool_loop.catalog import tool_loop_catalog

if TYPE_CHECKING:
    from examples.support_desk.world_store import WorldStore
    from runtime.providers.endpoint import ModelEndpointSettings


def catalogs(
    world: WorldStore | None, endpoint: ModelEndpointSettings | None = None
) -> Mapping[str, AgentCatalog]:
    """``world``: the simulated world the support desk's live READ providers use; ``endpoint``:
    the configured model endpoint (``Settings.models``) the tool loop offers. Both ``None`` in a
    sandboxed step's process."""
    return {
        SUPPORT_DESK: support_desk_catalog(world),
        SYNTHETIC: synthetic_catalog(),
        CODING_AGENT: coding_catalog(),
        TOOL_LOOP_GRAPH_ID: tool_loop_catalog(endpoint),
    }
