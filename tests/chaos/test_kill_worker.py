"""Fault injection (one trial each; ``python -m bench.chaos`` runs more): a worker SIGKILLed
during a ``--repeat`` replay and during an incident, and the Temporal dev server SIGKILLed and
restarted during a replay. The retry completes the work: every step recorded once, chains
intact, the incident's refund reconciled and never sent again, nothing left EXECUTING. (How
long each fault cost is a figure of ``bench.chaos``, not asserted here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_row import Row
from bench.chaos_temporal import incidents_under_fault, replays_under_fault


def assert_recovered(row: Row) -> None:
    assert row.tried == 1
    assert (row.completed, row.lost, row.duplicated) == (1, 0, 0), row
    assert row.intact == 1 and row.left_executing == 0, row
    assert len(row.lost_seconds) == 1  # the work resumed after the fault


@pytest.mark.parametrize("fault", ["worker", "temporal"])
async def test_a_repeat_replay_completes_after_a_sigkill(fault: str, tmp_path: Path) -> None:
    assert_recovered(await replays_under_fault(tmp_path, 1, fault))


async def test_an_incident_completes_after_its_worker_is_sigkilled(tmp_path: Path) -> None:
    assert_recovered(await incidents_under_fault(tmp_path, 1))
