"""An incident on an imported tau-bench run (issue 32, item 1): the recorded model is not
deployed here, so without a substitute the exact replay is INCONCLUSIVE with the reason (not a
failed activity) and the incident still reaches AWAITING_CONFIRMATION; with
``substitute_model`` every replay calls the local gemma3-270m, pinned in its manifest, and a
``confirm_root_cause`` signal completes the incident, whose report names the substitute.

Real Temporal dev server (its own: the session's server has the shared replay stack's workers
polling the same queues, and a second worker of one client on a queue is refused), real
workers in this process, the real local model server."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from integrations.tau_bench.importer import import_tau_bench
from models import FixtureMissPolicy
from models.incident_flow import IncidentPhase, IncidentRequest, IncidentView
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome
from stores.bundle import open_stores
from stores.sql.incidents import SqlIncidentStore
from tests.fixtures_models import MODEL_CALL_TIMEOUT
from tests.fixtures_replay import SANDBOX_MESSAGE_QUOTA, SANDBOX_WRITE_QUOTA
from tests.fixtures_tau import AIRLINE_VERSION, DATA, ENV_DATA
from tests.workflow_queries import query_status
from worker.settings import Settings
from worker.temporal import running_workers
from workflows.incident import IncidentWorkflow

SUBSTITUTE = "gemma3-270m"


async def _import_short_airline_run(stores: Any, folder: Path) -> str:
    """The shortest airline conversation of the tau-bench data (two answers, no tool call),
    imported through the real importer with its system prompt cut to the policy's first
    lines and no tool catalogue: each of its two model calls then reads a few hundred tokens
    instead of about 4,000 (minutes each on two busy cores). Its id."""
    records = json.loads((DATA / "airline" / "gpt-4o-airline.json").read_text())
    record = min(records, key=lambda r: len(r["traj"]))
    system = record["traj"][0]
    assert system["role"] == "system" and not any(m.get("tool_calls") for m in record["traj"])
    short = {
        **record,
        "traj": [{**system, "content": system["content"][:400]}, *record["traj"][1:]],
    }
    path = folder / "short-airline.json"
    path.write_text(json.dumps([short]))
    tools = folder / "no-tools.json"
    tools.write_text(json.dumps({"schemas": {"airline": []}, "write_tools": {"airline": []}}))
    report = await import_tau_bench(
        stores.ledger,
        stores.artifacts,
        stores.evidence,
        path,
        "airline",
        tools,
        env_version=AIRLINE_VERSION,
    )
    return str(report.run_ids[0])


def _settings(home: Path, address: str, models_url: str) -> Settings:
    return Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "TEMPORAL_ADDRESS": address,
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_LOCAL_MODELS_URL": models_url,
            "REPLAYBOOK_MODELS_TIMEOUT": str(MODEL_CALL_TIMEOUT * 4),
            "REPLAYBOOK_TAU_BENCH_DATA": str(ENV_DATA),
            "REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES": str(SANDBOX_WRITE_QUOTA),
            "REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES": str(SANDBOX_MESSAGE_QUOTA),
            "REPLAYBOOK_SANDBOX_WARM": "0",
        }
    )


async def _phase(handle: WorkflowHandle, phase: IncidentPhase, seconds: float) -> IncidentView:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        view = await query_status(handle, IncidentView)
        if view is not None and view.phase is phase:
            return view
        assert view is None or view.phase is not IncidentPhase.FAILED, view.error
        await asyncio.sleep(0.2)
    raise AssertionError(f"the incident did not reach {phase} in {seconds}s")


async def test_imported_run_incident_with_a_substitute_model(
    local_models_url: str, tmp_path: Path
) -> None:
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    try:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        await _incident_with_a_substitute(
            client, _settings(tmp_path, server.address, local_models_url), tmp_path
        )
    finally:
        server.stop(timeout=10)


async def _incident_with_a_substitute(
    temporal_client: Client, settings: Settings, tmp_path: Path
) -> None:
    async with open_stores(settings.stores) as stores:
        run_id = await _import_short_airline_run(stores, tmp_path)
        async with running_workers(settings, "all", temporal_client):
            # no substitute: the recorded model is not here; EXACT says so, the incident goes on
            bare = IncidentRequest(
                incident_id=f"INC-{uuid.uuid4().hex[:8]}", source_run_id=run_id, repeat=1
            )
            handle = await temporal_client.start_workflow(
                IncidentWorkflow.run, bare, id=bare.incident_id, task_queue=CONTROL_QUEUE
            )
            view = await _phase(handle, IncidentPhase.AWAITING_CONFIRMATION, 120)
            (exact,) = view.replays
            assert exact.inconclusive == 1 and exact.inconclusive_reasons == {"PREPARING": 1}
            outcome = await temporal_client.get_workflow_handle(
                exact.replay_id, result_type=ReplayOutcome
            ).result()
            assert outcome.verdict_reason is not None
            assert "recorded no model" in outcome.verdict_reason
            assert "--substitute-model" in outcome.verdict_reason
            await handle.terminate("the test is done with it")

            request = IncidentRequest(
                incident_id=f"INC-{uuid.uuid4().hex[:8]}",
                source_run_id=run_id,
                repeat=1,
                substitute_model=SUBSTITUTE,
                miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
            )
            handle = await temporal_client.start_workflow(
                IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
            )
            view = await _phase(handle, IncidentPhase.AWAITING_CONFIRMATION, 900)
            (exact,) = view.replays
            print(f"\nexact replay with {SUBSTITUTE}: {exact}")
            manifest = (
                await temporal_client.get_workflow_handle(
                    exact.replay_id, result_type=ReplayOutcome
                ).result()
            ).manifest
            assert manifest is not None and manifest.substituted_model == SUBSTITUTE
            assert SUBSTITUTE in (manifest.model_profile or "")
            await handle.signal(
                "confirm_root_cause",
                {
                    "root_cause": "the agent booked without checking the baggage allowance",
                    "fix_version": "prompt-v2",
                    "verified_by": "dana",
                    "replay_ids": [exact.replay_id],
                    "expectations": ["no side_effect cancel_reservation"],
                },
            )
            done = await _phase(handle, IncidentPhase.COMPLETED, 120)
            assert not done.rejected_signals, done.rejected_signals
            incident = await SqlIncidentStore(stores.db).get_incident(request.incident_id)
            refs: Any = (incident.record or {})["report_refs"]
            report = (await stores.artifacts.get(refs["md"])).decode()
            assert SUBSTITUTE in report
            bundle = json.loads(await stores.artifacts.get(refs["json"]))
            assert SUBSTITUTE in json.dumps(bundle)
