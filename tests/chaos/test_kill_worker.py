"""Fault injection (one trial each; ``python -m bench.chaos`` runs more), on one stack (a
Temporal dev server and a worker process of its own): the worker SIGKILLed during a
``--repeat`` replay and during an incident, then the Temporal dev server SIGKILLed and
restarted during a replay. The retry completes the work each time: every step recorded once,
chains intact, the incident's refund reconciled and never sent again, nothing left EXECUTING.
(How long each fault cost is a figure of ``bench.chaos``, not asserted here.)"""

from __future__ import annotations

from pathlib import Path

from bench.chaos_row import Row
from bench.chaos_temporal import incidents_under_fault, replays_under_fault, running_stack


def assert_recovered(row: Row) -> None:
    assert row.tried == 1
    assert (row.completed, row.lost, row.duplicated) == (1, 0, 0), row
    assert row.intact == 1 and row.left_executing == 0, row
    assert len(row.lost_seconds) == 1  # the work resumed after the fault


async def test_replays_and_incidents_complete_after_sigkills(tmp_path: Path) -> None:
    async with running_stack(tmp_path) as stack:
        assert_recovered(await replays_under_fault(stack, 1, "worker"))
        assert_recovered(await incidents_under_fault(stack, 1))
        assert_recovered(await replays_under_fault(stack, 1, "temporal"))
