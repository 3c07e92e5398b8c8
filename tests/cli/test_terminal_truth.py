"""Issue 30, item 7: what the terminal says is what happened. A reader that leaves early
(``| head``) ends the command quietly with exit code 0; Ctrl-C during ``replay --wait`` says
the replay goes on and how to cancel it; a replay ended from elsewhere reads CANCELED to its
waiter as to ``replay status``; a ``--repeat`` replay has one verdict; the verdict is printed
before the differences it rests on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from devstack.temporal_server import TemporalDevServer, start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def env_for(home: Path, temporal: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "TEMPORAL_"))}
    return env | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        "REPLAYBOOK_LOCAL_MODELS": "off",
        "TEMPORAL_ADDRESS": temporal,
    }


@pytest.fixture(scope="module")
def idle_temporal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    """A Temporal server no worker polls: a replay started on it waits for ever, so the
    tests choose when it ends."""
    server = start_temporal_dev_server(tmp_path_factory.mktemp("idle-temporal"), headless=True)
    try:
        yield server
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("terminal")
    settings = Settings.from_env({"REPLAYBOOK_HOME": str(home), "TEMPORAL_ADDRESS": "127.0.0.1:1"})
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        result = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=2)
    return home, result.run_id


@pytest.mark.parametrize("command", ["runs list", "runs show", "canonical"])
async def test_a_reader_that_left_ends_the_command_quietly(
    recorded: tuple[Path, str], command: str
) -> None:
    """The pipe's reading end is closed before the command writes (as ``head -1`` does once
    it has its line): every write meets EPIPE."""
    home, run_id = recorded
    args = {"runs list": ["runs", "list"], "runs show": ["runs", "show", run_id]}.get(
        command, ["canonical"]
    )
    result = _into_closed_pipe(args, env_for(home, "127.0.0.1:1"))
    assert result.returncode == 0, result.stderr.decode()
    assert b"internal error" not in result.stderr and b"BrokenPipe" not in result.stderr


def _into_closed_pipe(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [REPLAYBOOK, *args],
            input=b'{"b": 2, "a": 1}',
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write_end)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [REPLAYBOOK, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT
    )


def _status_json(replay_id: str, env: dict[str, str]) -> dict:
    shown = subprocess.run(
        [REPLAYBOOK, "replay", "status", replay_id, "--json"],
        capture_output=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    return json.loads(shown.stdout)


async def _wait_until_started(client: Client, workflow_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            await client.get_workflow_handle(workflow_id).describe()
            return
        except RPCError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"{workflow_id} never started")


async def _idle_client(server: TemporalDevServer) -> Client:
    return await Client.connect(server.address, data_converter=pydantic_data_converter)


async def test_ctrl_c_while_waiting_says_the_replay_goes_on(
    recorded: tuple[Path, str], idle_temporal: TemporalDevServer
) -> None:
    home, run_id = recorded
    client = await _idle_client(idle_temporal)
    waiter = _spawn(
        ["replay", "start", run_id, "--replay-id", "replay-ctrl-c", "--wait"],
        env_for(home, idle_temporal.address),
    )
    await _wait_until_started(client, "replay-ctrl-c")
    waiter.send_signal(signal.SIGINT)
    _, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 130, err.decode()
    assert "replay replay-ctrl-c continues" in err.decode()
    assert "replaybook replay cancel replay-ctrl-c" in err.decode()
    described = await client.get_workflow_handle("replay-ctrl-c").describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    await client.get_workflow_handle("replay-ctrl-c").terminate("test over")


async def test_a_replay_ended_elsewhere_reads_canceled_to_its_waiter(
    recorded: tuple[Path, str], idle_temporal: TemporalDevServer
) -> None:
    home, run_id = recorded
    client = await _idle_client(idle_temporal)
    env = env_for(home, idle_temporal.address)
    waiter = _spawn(
        ["replay", "start", run_id, "--replay-id", "replay-ended", "--wait", "--json"], env
    )
    await _wait_until_started(client, "replay-ended")
    await client.get_workflow_handle("replay-ended").terminate("ended by an operator")
    out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 1, err.decode()
    assert json.loads(out)["status"] == "CANCELED"
    assert _status_json("replay-ended", env)["status"] == "CANCELED"


async def test_a_repeat_replay_has_one_verdict_and_it_comes_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Pure: the view of a finished ``--repeat`` replay and its text."""
    from app.replays import outcome_view
    from cli.replay import _print_view
    from models import ReplayMode, ReplayStatus
    from models.enums import ReplayConfidence
    from models.replay_flow import ReplayOutcome

    summary = {
        "reproduced": 0,
        "not_reproduced": 3,
        "inconclusive": 2,
        "runs": 5,
        "rate": 0.0,
        "ci95": [0.0, 0.56],
        "inconclusive_reasons": {"BUDGET": 2},
    }
    outcome = ReplayOutcome(
        replay_id="replay-r",
        source_run_id="run-1",
        mode=ReplayMode.PROMPT_SWAP,
        status=ReplayStatus.COMPLETED,
        confidence=ReplayConfidence.FULL,
        completeness="6/6",
        summary=summary,
    )
    view = outcome_view(outcome)
    assert view["verdict"] == "INCONCLUSIVE"  # 0/3 conclusive, 2 cut short: not shown gone
    assert "reproduced 0/3 conclusive" in view["verdict_reason"]
    all_concluded = outcome_view(
        outcome.model_copy(update={"summary": summary | {"not_reproduced": 5, "inconclusive": 0}})
    )
    assert all_concluded["verdict"] == "NOT_REPRODUCED"
    view["comparison"] = {
        "same_outcome": False,
        "same_tool_sequence": False,
        "same_side_effects": False,
        "answer_similarity": 0.1,
        "diffs": [{"critical": True, "type": "NEW_SIDE_EFFECT", "explanation": "a refund"}],
    }
    _print_view(view)
    text = capsys.readouterr().out
    assert text.index("verdict INCONCLUSIVE") < text.index("CRITICAL NEW_SIDE_EFFECT")
