"""The worker processes of infra/compose.yaml, run without containers: a control worker and a
replay worker (the compose file's own commands) serve their counters on
``REPLAYBOOK_METRICS_PORT``, the Temporal SDK's metrics on ``REPLAYBOOK_TEMPORAL_METRICS_PORT``,
and log one JSON summary line per replay and per incident. Their own Temporal dev server, so no
other worker competes for the task queues."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.ports import free_ports
from devstack.temporal_server import TemporalDevServer, start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentPhase, IncidentRequest, RootCauseConfirmation
from models.queues import CONTROL_QUEUE
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from tests.workflows.test_incident_workflow import wait_phase
from workflows.incident import IncidentWorkflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[TemporalDevServer]:
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    try:
        yield server
    finally:
        server.stop(timeout=10)


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()
    except OSError:
        return None


async def poll(url: str, deadline_s: float = 60) -> str:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        body = await asyncio.to_thread(fetch, url)
        if body is not None:
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{url} did not answer in {deadline_s}s")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_worker_process_serves_metrics_and_logs_summaries(
    own_server: TemporalDevServer, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    port, sdk_port, replay_port, replay_sdk_port = free_ports(4)
    env = {
        **os.environ,
        "REPLAYBOOK_HOME": str(home),
        "TEMPORAL_ADDRESS": own_server.address,
        "REPLAYBOOK_LOG_FORMAT": "json",
    }
    from worker.settings import Settings

    settings = Settings.from_env(env)
    async with open_stores(
        settings.stores
    ) as stores:  # the worker's database: migrations, sim tables
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        refund = await run_scenario(
            world, stores.ledger, stores.artifacts, "refund-timeout", seed=3
        )
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())["services"]
    stderr = (tmp_path / "worker.stderr").open("wb")
    pools = []
    for service, metrics_port, temporal_port in (
        ("control-worker", port, sdk_port),
        ("replay-worker", replay_port, replay_sdk_port),
    ):
        command = compose[service]["command"]
        assert command[:3] == ["python", "-m", "worker"]
        pool_env = {
            **env,
            "REPLAYBOOK_METRICS_PORT": str(metrics_port),
            "REPLAYBOOK_TEMPORAL_METRICS_PORT": str(temporal_port),
        }
        pools.append(
            await asyncio.create_subprocess_exec(
                sys.executable, *command[1:], cwd=ROOT, env=pool_env, stderr=stderr
            )
        )
    try:
        await poll(f"http://127.0.0.1:{port}/metrics")
        client = await Client.connect(own_server.address, data_converter=pydantic_data_converter)
        request = IncidentRequest(
            incident_id="INC-metrics-1", source_run_id=refund.run_id, repeat=2
        )
        handle = await client.start_workflow(
            IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
        )
        view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
        await handle.execute_update(
            "confirm_root_cause",
            RootCauseConfirmation(
                root_cause="the provider committed the refund and lost the response",
                fix_version="payments-client-2",
                verified_by="dana",
                replay_ids=(view.replays[0].replay_id,),
            ),
        )
        final = await handle.result()
        assert final.phase is IncidentPhase.COMPLETED

        body = await poll(f"http://127.0.0.1:{port}/metrics")
        got = samples(body)
        # the UNKNOWN refund was counted by the process that recorded it (this test's): the
        # incident's worker, which only found it, does not count it a second time
        assert ("agent_unknown_side_effect_total", (("capability", "payment.refund"),)) not in got
        assert got[("agent_reconciliation_total", (("result", "applied"),))] == 1
        assert got[("agent_incident_regression_case_total", ())] == 1
        replays = {k: v for k, v in got.items() if k[0] == "agent_replay_total"}
        assert sum(replays.values()) == 2  # the two exact repeats, each counted once
        assert all(dict(k[1])["mode"] == "EXACT" for k in replays)
        assert got[("agent_replay_duration_seconds_count", (("mode", "EXACT"),))] == 2
        blocked = sum(v for k, v in got.items() if k[0] == "agent_replay_write_blocked_total")
        assert blocked >= 2  # each repeat attempted the refund and was blocked

        sdk = await poll(f"http://127.0.0.1:{sdk_port}/metrics")
        assert "temporal_" in sdk and 'workflow_type="Incident"' in sdk
        # the replay pool ran the steps: its SDK metrics show them, its own counters are empty
        replay_sdk = await poll(f"http://127.0.0.1:{replay_sdk_port}/metrics")
        assert 'activity_type="replay_step"' in replay_sdk
        replay_own = samples(await poll(f"http://127.0.0.1:{replay_port}/metrics"))
        assert not [k for k in replay_own if k[0] == "agent_replay_total"]
    finally:
        for worker in pools:
            worker.send_signal(signal.SIGTERM)
        for worker in pools:
            try:
                await asyncio.wait_for(worker.wait(), 30)
            except TimeoutError:
                worker.kill()
                await worker.wait()
        stderr.close()

    lines = []
    for raw in (tmp_path / "worker.stderr").read_text().splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    summaries = [line for line in lines if line.get("event") == "replay summary"]
    assert len(summaries) == 2
    assert {s["replay_id"] for s in summaries} == {
        f"{request.incident_id}-exact-000",
        f"{request.incident_id}-exact-001",
    }
    assert all(
        s["run_id"] == refund.run_id and s["workflow_id"] == s["replay_id"] for s in summaries
    )
    assert all("duration_seconds" in s and "model_calls" in s for s in summaries)
    (incident,) = [line for line in lines if line.get("event") == "incident summary"]
    assert incident["incident_id"] == request.incident_id and incident["phase"] == "COMPLETED"
    assert incident["regression_case_id"] == final.regression_case_id
