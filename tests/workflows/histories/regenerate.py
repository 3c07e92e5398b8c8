"""Regenerate the saved workflow histories: ``.venv/bin/python -m tests.workflows.histories.regenerate``.

Runs each workflow once on a throw-away dev server and saves its history as JSON here. The
histories are committed; ``tests/workflows/test_determinism.py`` replays them with Temporal's
``Replayer`` so that a change that breaks determinism fails CI. Regenerate only on purpose
(a deliberate, patched workflow change), never to make that test pass.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import uuid
from pathlib import Path

from devstack.temporal_server import start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models import FixtureMissPolicy, ReplayMode
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayPlan, ReplayWorkflowInput
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_replay import stack_settings
from worker.temporal import connect, running_workers
from workflows.replay import ReplayWorkflow

HERE = Path(__file__).resolve().parent


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        server = start_temporal_dev_server(home / "temporal", headless=True)
        try:
            settings = stack_settings(home, server.address)
            async with open_stores(settings.stores) as stores:
                world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
                run = await run_scenario(
                    world, stores.ledger, stores.artifacts, "wrong-customer", seed=1
                )
                client = await connect(settings)
                plans = {
                    "replay_recorded": ReplayPlan(
                        replay_id=f"replay-{uuid.uuid4().hex[:8]}",
                        source_run_id=run.run_id,
                        mode=ReplayMode.RECORDED,
                    ),
                    "replay_prompt_swap_repeat": ReplayPlan(
                        replay_id=f"replay-{uuid.uuid4().hex[:8]}",
                        source_run_id=run.run_id,
                        mode=ReplayMode.PROMPT_SWAP,
                        prompt_version="v18",
                        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
                        repeat=3,
                    ),
                }
                async with running_workers(settings, "all", client):
                    for name, plan in plans.items():
                        handle = await client.start_workflow(
                            ReplayWorkflow.run,
                            ReplayWorkflowInput(plan=plan),
                            id=plan.replay_id,
                            task_queue=CONTROL_QUEUE,
                        )
                        await handle.result()
                        history = await handle.fetch_history()
                        (HERE / f"{name}.json").write_text(
                            json.dumps(json.loads(history.to_json()), indent=1) + "\n"
                        )
                        print(f"saved {name}.json ({len(history.events)} events)")
                    await _incident(client, world, stores)
        finally:
            server.stop(timeout=20)


async def _incident(client, world, stores) -> None:
    from models.incident_flow import IncidentPhase, IncidentRequest, RootCauseConfirmation
    from tests.workflows.test_incident_workflow import wait_phase
    from workflows.incident import IncidentWorkflow

    run = await run_scenario(world, stores.ledger, stores.artifacts, "refund-timeout", seed=2)
    request = IncidentRequest(
        incident_id=f"INC-{uuid.uuid4().hex[:8]}", source_run_id=run.run_id, repeat=2
    )
    handle = await client.start_workflow(
        IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="lost response",
            fix_version="v2",
            verified_by="history",
            replay_ids=(view.replays[0].replay_id,),
        ),
    )
    await handle.result()
    history = await handle.fetch_history()
    (HERE / "incident_refund_timeout.json").write_text(
        json.dumps(json.loads(history.to_json()), indent=1) + "\n"
    )
    print(f"saved incident_refund_timeout.json ({len(history.events)} events)")


if __name__ == "__main__":
    asyncio.run(main())
