"""The seed's own replay request over the API in process, on the real replay stack (Temporal
dev server, workers): ``startFromStep`` names the first step *regenerated* — history before
it, the step itself re-run under the candidate (the seed: "before step_17 use history, from
step_18 regenerate")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from examples.support_desk.agent import PROMPTS
from tests.workflows.test_incident_workflow import wrong_customer_run

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "from-step-token"


async def poll(get: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        value = await get()
        if done(value):
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} did not finish in 180 s")


async def test_start_from_planner_regenerates_the_planner_under_v18(replay_stack) -> None:
    run_id = await wrong_customer_run(replay_stack)
    app = create_app(replay_stack.settings, ApiConfig(tokens={TOKEN: frozenset({Role.ENGINEER})}))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", headers=headers, timeout=60
        ) as api:
            started = await api.post(
                "/api/replays",
                json={
                    "sourceRunId": run_id,
                    "mode": "PROMPT_SWAP",
                    "candidatePromptVersion": "v18",
                    "startFromStep": "planner",
                    "fixtureMissPolicy": "SANDBOX_LIVE",
                    "budget": {"maxModelCalls": 5, "maxCost": 1.0},
                },
            )
            assert started.status_code == 202, started.text
            replay_id = started.json()["replayId"]

            async def view() -> Any:
                return (await api.get(f"/api/replays/{replay_id}")).json()

            done = await poll(
                view, lambda v: v["status"] in ("COMPLETED", "FAILED", "CANCELED"), "the replay"
            )
            assert done["status"] == "COMPLETED", done
            assert done["manifest"]["promptBundleHash"] == PROMPTS["v18"].bundle_hash()
            replayed = (await api.get(f"/api/runs/{replay_id}")).json()["events"]
            recorded = (await api.get(f"/api/runs/{run_id}")).json()["events"]
    finally:
        await app.state.api.close()

    def steps(events: list[dict[str, Any]]) -> list[str]:
        return [e["step_id"] for e in events if e["type"] == "STEP_STARTED"]

    # the planner is the first step regenerated: it ran again, with a model call, under v18
    assert steps(recorded)[0] == "planner" and steps(replayed)[0] == "planner"
    planner_calls = [e for e in replayed if e["type"] == "MODEL_CALL" and e["step_id"] == "planner"]
    assert len(planner_calls) >= 1
    # v18 identifies the customer by id: the wrong customer is no longer e-mailed
    assert done["verdict"] == "NOT_REPRODUCED", done.get("verdictReason")
    assert done["writesExecuted"] == 0
