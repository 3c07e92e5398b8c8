"""The shortest scored tau-bench airline conversation, imported alone: the tests that replay
an imported run against the world or a real model stay short with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from integrations.tau_bench.importer import import_tau_bench
from tests.testdata import unpacked_testdata

DATA = unpacked_testdata() / "tau-bench"
ENV_DATA = DATA / "env-data"
#: the databases the airline runs were recorded against
AIRLINE_VERSION = "7362a17"


async def import_shortest_airline_run(stores: Any, folder: Path) -> str:
    """Import the airline run with the fewest messages (written to ``folder`` first); its id."""
    records = json.loads((DATA / "airline" / "gpt-4o-airline.json").read_text())
    path = folder / "shortest-airline.json"
    path.write_text(json.dumps([min(records, key=lambda r: len(r["traj"]))]))
    report = await import_tau_bench(
        stores.ledger,
        stores.artifacts,
        stores.evidence,
        path,
        "airline",
        DATA / "tools_info.json",
        env_version=AIRLINE_VERSION,
    )
    return str(report.run_ids[0])
