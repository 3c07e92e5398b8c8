"""The exact ``temporal`` commands of infra/README.md, run against the session's real Temporal
dev server with real workers: they start a replay and an incident and confirm its root cause."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentPhase, IncidentView
from stores.sql.incidents import SqlIncidentStore

README = Path(__file__).resolve().parents[2] / "infra" / "README.md"
BIN = Path(sys.executable).parent


def readme_commands() -> dict[str, str]:
    """``<!-- cli:NAME -->`` followed by a fenced sh block -> the command (continuations joined)."""
    text = README.read_text()
    found = re.findall(r"<!-- cli:([a-z-]+) -->\n```sh\n(.*?)```", text, flags=re.S)
    return {name: body.replace("\\\n", " ").strip() for name, body in found}


def run(command: str, address: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
    }
    return subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=300
    )


async def sh(command: str, address: str) -> subprocess.CompletedProcess[str]:
    done = await asyncio.to_thread(run, command, address)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


async def record_wrong_customer_run(stack, run_id: str) -> None:
    """The README's run id, recorded with a seed whose run emails the wrong customer."""
    for seed in range(50):
        trial = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=seed
        )
        if trial.outcome["emailed"] == "bob@example.com":
            break
    else:
        raise AssertionError("no seed emails the wrong customer")
    result = await run_scenario(
        stack.world,
        stack.stores.ledger,
        stack.stores.artifacts,
        "wrong-customer",
        seed=seed,
        run_id=run_id,
    )
    assert result.outcome["emailed"] == "bob@example.com"


def test_the_readme_names_every_step() -> None:
    assert set(readme_commands()) == {
        "start-replay",
        "replay-result",
        "start-incident",
        "incident-waiting",
        "confirm",
        "incident-result",
    }
    for command in readme_commands().values():
        assert command.startswith("temporal workflow ")


async def test_readme_temporal_commands_run_a_replay_and_an_incident(
    replay_stack, temporal_server
) -> None:
    commands = readme_commands()
    address = temporal_server.address
    await record_wrong_customer_run(replay_stack, "run-9182")

    await sh(commands["start-replay"], address)
    replay = json.loads((await sh(commands["replay-result"], address)).stdout)
    outcome = replay["result"] if "result" in replay else replay
    assert outcome["status"] == "COMPLETED" and outcome["mode"] == "PROMPT_SWAP"
    assert outcome["summary"]["runs"] == 5 and outcome["summary"]["reproduced"] == 0
    assert len(outcome["children"]) == 5

    await sh(commands["start-incident"], address)
    deadline = time.monotonic() + 240
    while "INC-2026-081" not in (await sh(commands["incident-waiting"], address)).stdout:
        assert time.monotonic() < deadline, "the incident never reached AWAITING_CONFIRMATION"
        await asyncio.sleep(0.5)
    confirmed = await sh(commands["confirm"], address)
    assert "confirmed" in confirmed.stdout

    final = json.loads((await sh(commands["incident-result"], address)).stdout)
    view = final["result"] if "result" in final else final
    assert view["phase"] == IncidentPhase.COMPLETED.value
    assert view["confirmation"]["verified_by"] == "dana"
    assert view["confirmation"]["replay_ids"] == ["INC-2026-081-cf1"]
    assert view["signature"]["signature"] == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    replays = {r["replay_id"]: r for r in view["replays"]}
    assert set(replays) == {"INC-2026-081-exact", "INC-2026-081-cf1"}
    assert replays["INC-2026-081-cf1"]["reproduced"] == 0
    # the workflow's own view agrees (the CLI prints empty lists as null)
    stored = await SqlIncidentStore(replay_stack.stores.db).get_incident("INC-2026-081")
    assert IncidentView.model_validate(stored.record).phase is IncidentPhase.COMPLETED
    case = await SqlIncidentStore(replay_stack.stores.db).get_case(view["regression_case_id"])
    assert case.incident_id == "INC-2026-081"
