"""An incident waiting for its human survives its worker being killed and the Temporal
server restarting; the confirmation then completes it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentPhase, IncidentRequest, IncidentView, RootCauseConfirmation
from models.queues import CONTROL_QUEUE
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_replay import stack_settings
from tests.workflows.test_incident_workflow import wait_phase
from tests.workflows.test_replay_durability import start_worker, stop
from workflows.incident import IncidentWorkflow


@pytest.mark.parametrize("disruption", ["kill-worker", "restart-temporal"])
async def test_incident_survives_while_waiting_for_confirmation(
    disruption: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    workers = []
    try:
        settings = stack_settings(home, server.address)
        async with open_stores(settings.stores) as stores:
            world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
            await world.ensure()
            run = await run_scenario(
                world, stores.ledger, stores.artifacts, "refund-timeout", seed=2
            )
            client = await Client.connect(server.address, data_converter=pydantic_data_converter)
            workers.append(start_worker(home, server.address))
            request = IncidentRequest(
                incident_id=f"INC-{uuid.uuid4().hex[:8]}", source_run_id=run.run_id, repeat=2
            )
            handle = await client.start_workflow(
                IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
            )
            view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION, deadline_s=120)
            if disruption == "kill-worker":
                stop(workers.pop())
                workers.append(start_worker(home, server.address))
            else:
                port = server.port
                server.stop(timeout=20)
                server = start_temporal_dev_server(tmp_path / "temporal", port=port, headless=True)
                client = await Client.connect(
                    server.address, data_converter=pydantic_data_converter
                )
                handle = client.get_workflow_handle(request.incident_id, result_type=IncidentView)
            await handle.execute_update(
                "confirm_root_cause",
                RootCauseConfirmation(
                    root_cause="the provider lost the response after committing the refund",
                    fix_version="payments-client-2",
                    verified_by="dana",
                    replay_ids=(view.replays[0].replay_id,),
                ),
            )
            final: IncidentView = await handle.result()
            assert final.phase is IncidentPhase.COMPLETED
            assert final.confirmation is not None and final.confirmation.verified_by == "dana"
            assert final.regression_case_id and final.report_refs
    finally:
        for process in workers:
            stop(process)
        server.stop(timeout=20)
