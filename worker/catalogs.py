"""The agents whose code this deployment can replay, by graph id.

A module of its own (light to import) because every sandboxed replay step imports it in a
fresh process; there it is called with no database (the broker serves what needs one).
"""

from __future__ import annotations

from collections.abc import Mapping

from examples.coding_agent import GRAPH_ID as CODING_AGENT
from examples.coding_agent import coding_catalog
from examples.support_desk.agent import GRAPH_ID as SUPPORT_DESK
from examples.support_desk.catalog import support_desk_catalog
from examples.synthetic import GRAPH_ID as SYNTHETIC
from examples.synthetic import synthetic_catalog
from models.ingest import TOOL_LOOP_GRAPH_ID
from runtime.replay.catalog import AgentCatalog
from runtime.tool_loop.catalog import tool_loop_catalog
from stores.sql.database import Database


def catalogs(db: Database | None) -> Mapping[str, AgentCatalog]:
    return {
        SUPPORT_DESK: support_desk_catalog(db),  # type: ignore[arg-type]
        SYNTHETIC: synthetic_catalog(),
        CODING_AGENT: coding_catalog(),
        TOOL_LOOP_GRAPH_ID: tool_loop_catalog(),
    }
