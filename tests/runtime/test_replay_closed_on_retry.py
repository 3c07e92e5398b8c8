"""A worker killed after the last step of a replay was recorded but before the replay's run
was closed: the retry finds the step recorded and closes the run (COMPLETED)."""

from __future__ import annotations

import uuid
from typing import Any

from app.local_replay import engine_for, run_prepared
from models import ReplayMode, RunStatus
from models.replay_flow import ReplayPlan
from tests.runtime.conftest import Recording
from tests.runtime.test_ingest import _ingest


class _Killed(BaseException):
    """Stands in for SIGKILL between the last step's commit and ``finish_run``."""


async def test_a_replay_whose_last_step_was_recorded_is_closed_by_the_retry(
    rec: Recording,
) -> None:
    source_id = f"closed-source-{uuid.uuid4().hex[:8]}"
    await _ingest(rec, source_id)  # an ingested run: the tool loop's catalog replays it
    engine = engine_for(rec)  # type: ignore[arg-type]
    plan = ReplayPlan(
        replay_id=f"closed-{uuid.uuid4().hex[:8]}",
        source_run_id=source_id,
        mode=ReplayMode.RECORDED,
    )
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    finish = rec.ledger.finish_run

    async def killed(*args: Any, **kwargs: Any) -> Any:
        raise _Killed

    rec.ledger.finish_run = killed  # type: ignore[method-assign]
    try:
        await run_prepared(engine, plan, prepared)
    except _Killed:
        pass
    finally:
        rec.ledger.finish_run = finish  # type: ignore[method-assign]
    assert (await rec.ledger.get_run(plan.replay_id)).status is RunStatus.RUNNING
    events = len(await rec.ledger.events(plan.replay_id))

    await run_prepared(engine, plan, prepared)  # the activity's retry, from the same input
    closed = await rec.ledger.get_run(plan.replay_id)
    assert closed.status is RunStatus.COMPLETED and closed.outcome is not None
    assert len(await rec.ledger.events(plan.replay_id)) == events  # nothing ran twice
    assert (await rec.ledger.verify(plan.replay_id)).intact
