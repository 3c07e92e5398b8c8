"""Issue 30, item 6: a request that cannot work is refused before any workflow starts, by the
same checks on both faces — a used incident or replay id (exit 2 / 409 naming the existing
one), an unknown prompt, model or step, a denied approval the run never had (exit 2 / 422).
Most of these run with Temporal unreachable: a refusal that needed Temporal would be exit 4 /
503, so each one shows the check came first."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.queues import CONTROL_QUEUE
from stores.bundle import open_stores
from stores.sql.incidents import SqlIncidentStore
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")
NO_TEMPORAL = "127.0.0.1:1"


def cli(home: Path, temporal: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "TEMPORAL_"))}
    env |= {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        "REPLAYBOOK_LOCAL_MODELS": "off",
        "TEMPORAL_ADDRESS": temporal,
    }
    return subprocess.run(
        [REPLAYBOOK, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A home whose ledger holds one recorded wrong-customer run (approved refund and e-mail)
    and a confirmed, reported incident ``INC-done`` for it (as the workflow records it)."""
    home = tmp_path_factory.mktemp("refused")
    settings = Settings.from_env({"REPLAYBOOK_HOME": str(home), "TEMPORAL_ADDRESS": NO_TEMPORAL})
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        result = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
        await SqlIncidentStore(stores.db).save_incident(
            "INC-done", result.run_id, "PROMPT", "SIG", "SIG", "CLOSED", {"confirmed": True}
        )
    return home, result.run_id


async def test_unknown_prompt_model_and_step_are_refused_before_temporal(
    recorded: tuple[Path, str],
) -> None:
    home, run_id = recorded
    for args, named in (
        (("--mode", "prompt-swap", "--prompt", "v99"), "--prompt v99"),
        (("--mode", "model-swap", "--model", "no-such-model"), "--model no-such-model"),
        (("--mode", "fork", "--from-step", "no_such_step"), "--from-step no_such_step"),
        (("--mode", "exact", "--policy", "p99"), "--policy p99"),
    ):
        result = cli(home, NO_TEMPORAL, "replay", "start", run_id, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert named in result.stderr and "internal error" not in result.stderr


async def test_a_recorded_incident_id_is_refused(recorded: tuple[Path, str]) -> None:
    home, run_id = recorded
    result = cli(home, NO_TEMPORAL, "incident", "open", run_id, "--incident-id", "INC-done")
    assert result.returncode == 2, result.stderr
    assert "--incident-id INC-done: incident 'INC-done' already exists (phase CLOSED" in (
        result.stderr
    )


async def test_ids_temporal_still_knows_are_refused(
    recorded: tuple[Path, str], temporal_client: Client
) -> None:
    """A finished workflow's id (here: terminated, with no worker ever picking it up) is
    never reused: Temporal's default policy would start a new workflow over it."""
    home, run_id = recorded
    address = temporal_client.service_client.config.target_host
    for workflow, used, command in (
        ("Incident", "INC-closed-1", ("incident", "open", run_id, "--incident-id")),
        ("Replay", "replay-closed-1", ("replay", "start", run_id, "--replay-id")),
    ):
        handle = await temporal_client.start_workflow(
            workflow, {}, id=used, task_queue=f"{CONTROL_QUEUE}-nobody"
        )
        await handle.terminate("closed for the test")
        result = cli(home, address, *command, used)
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"'{used}' already exists (workflow TERMINATED)" in result.stderr
        described = await temporal_client.get_workflow_handle(used).describe()
        assert described.status == WorkflowExecutionStatus.TERMINATED  # not replaced


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def api(recorded: tuple[Path, str]) -> AsyncIterator[httpx.AsyncClient]:
    home, _ = recorded
    settings = Settings.from_env({"REPLAYBOOK_HOME": str(home), "TEMPORAL_ADDRESS": NO_TEMPORAL})
    app = create_app(settings, ApiConfig(tokens={"eng": frozenset({Role.ENGINEER})}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://api", headers={"Authorization": "Bearer eng"}
    ) as client:
        yield client
    await app.state.api.close()


async def test_both_faces_refuse_a_denial_the_run_never_had(
    recorded: tuple[Path, str], api: httpx.AsyncClient
) -> None:
    home, run_id = recorded
    body = {"sourceRunId": run_id, "mode": "EXACT", "denyApprovals": ["crm.update"]}
    answer = await api.post("/api/replays", json=body)
    assert answer.status_code == 422, answer.text
    assert "denyApprovals crm.update: run" in answer.text and "recorded no approval" in answer.text
    result = cli(home, NO_TEMPORAL, "replay", "start", run_id, "--deny-approval", "crm.update")
    assert result.returncode == 2, result.stderr
    assert "--deny-approval crm.update: run" in result.stderr
    unknown = await api.post(
        "/api/replays",
        json={"sourceRunId": run_id, "mode": "PROMPT_SWAP", "candidatePromptVersion": "v99"},
    )
    assert unknown.status_code == 422 and "candidatePromptVersion v99" in unknown.text


async def test_both_faces_refuse_an_unknown_capability_with_the_same_message(
    recorded: tuple[Path, str], api: httpx.AsyncClient
) -> None:
    """Issue 34's acceptance: the same invalid request through both faces, the same words
    (each face names the input as its user wrote it: the flag or the JSON field)."""
    home, run_id = recorded
    body = {"sourceRunId": run_id, "mode": "EXACT", "denyApprovals": ["no.such.capability"]}
    answer = await api.post("/api/replays", json=body)
    assert answer.status_code == 422, answer.text
    api_message = answer.json()["message"].removeprefix("denyApprovals ")
    result = cli(
        home, NO_TEMPORAL, "replay", "start", run_id, "--deny-approval", "no.such.capability"
    )
    assert result.returncode == 2, result.stderr
    refusals = [line for line in result.stderr.splitlines() if line.startswith("replaybook: ")]
    assert refusals == [f"replaybook: --deny-approval {api_message}"], result.stderr
    assert api_message.startswith(f"no.such.capability: run {run_id} recorded no approval")


async def test_a_tampered_source_is_refused_before_temporal(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Issue 31: a replay of a run that does not verify refuses to start (exit 1 naming the
    place), not a started replay that fails in PREPARING."""
    import json

    from sqlalchemy import text

    home = tmp_path_factory.mktemp("tampered")
    settings = Settings.from_env({"REPLAYBOOK_HOME": str(home), "TEMPORAL_ADDRESS": NO_TEMPORAL})
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        result = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
        header = json.loads((await stores.ledger.get_run(result.run_id)).model_dump_json())
        async with stores.db.engine.begin() as conn:
            await conn.execute(
                text("UPDATE runs SET record = :v WHERE run_id = :r"),
                {"v": json.dumps(header | {"outcome": "forged"}), "r": result.run_id},
            )
    refused = cli(home, NO_TEMPORAL, "replay", "start", result.run_id, "--mode", "exact")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"refusing to replay {result.run_id}: run {result.run_id} does not verify" in (
        refused.stderr
    )
    assert "run header outcome" in refused.stderr
