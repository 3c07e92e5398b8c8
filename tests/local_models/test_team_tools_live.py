"""Your tools in the sandbox, end to end (issue 32, item 3): an ingested run of the live
examples' desk (one answer, no tool call) replayed through Temporal (its own dev server, real
workers in this process, steps in bubblewrap) against the real local model server, with a
candidate system prompt and tool catalogue that make gemma3-270m ask for ``shipping_status``,
a READ tool the recording never saw. The team's module (``examples.live.desk_replay_tools``)
answers it inside the sandbox at the run's logical time; the replay ends with a verdict, and
its manifest pins the module.

The model samples: the replay's sampling seed 3 is one under which gemma3-270m calls the tool
for this prompt (checked by hand against the local server: 2 of 2 calls; seeds 1, 2 and 4
answered in text). Two live model calls at most (the second reads the team's answer; when
the small model asks again the replay stops at its cap, INCONCLUSIVE for BUDGET, as it did in
our runs): about 70-95 s on two busy cores."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from app.candidates import store_candidates
from app.replay_checks import pin_tools_module
from app.replays import new_plan, start_replay
from devstack.temporal_server import start_temporal_dev_server
from examples.live.desk_replay_tools import ANSWERED_BY
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode, ToolFixture
from models.replay_flow import ReplayOutcome
from stores.bundle import open_stores
from tests.fixtures_models import MODEL_CALL_TIMEOUT
from tests.fixtures_replay import SANDBOX_MESSAGE_QUOTA, SANDBOX_WRITE_QUOTA
from tests.fixtures_team_tools import DESK_TOOLS, MODULE, STARTED, ingest_desk_run
from worker.catalogs import deployment_catalogs
from worker.settings import Settings
from worker.temporal import running_workers

MODEL = "gemma3-270m"
#: the candidate: the parcel first (the recorded prompt never asked for it)
PROMPT = (
    "You are a support agent. First call shipping_status with the order id, then answer in "
    "one sentence."
)
SEED = 3


def _settings(home: Path, address: str, models_url: str) -> Settings:
    return Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "TEMPORAL_ADDRESS": address,
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_LOCAL_MODELS_URL": models_url,
            "REPLAYBOOK_MODELS_TIMEOUT": str(MODEL_CALL_TIMEOUT * 4),
            "REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES": str(SANDBOX_WRITE_QUOTA),
            "REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES": str(SANDBOX_MESSAGE_QUOTA),
            "REPLAYBOOK_SANDBOX_WARM": "0",
        }
    )


async def test_a_new_read_call_is_answered_by_the_teams_code_in_the_sandbox(
    local_models_url: str, tmp_path: Path
) -> None:
    server = start_temporal_dev_server(tmp_path / "temporal", headless=True)
    try:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        await _replay_with_team_tools(client, _settings(tmp_path, server.address, local_models_url))
    finally:
        server.stop(timeout=10)


async def _replay_with_team_tools(client: Client, settings: Settings) -> None:
    async with open_stores(settings.stores) as stores:
        run_id = await ingest_desk_run(stores, f"desk-{uuid.uuid4().hex[:8]}", MODEL)
        parcel = [t.model_dump(mode="json") for t in DESK_TOOLS if t.name == "shipping_status"]
        candidates = await store_candidates(
            stores.artifacts, system_prompt=PROMPT, tools=json.dumps(parcel)
        )
        pin = pin_tools_module(MODULE, "--tools-module")
        plan = new_plan(
            run_id,
            ReplayMode.PROMPT_SWAP,
            sampling_seed=SEED,
            miss=FixtureMissPolicy.SANDBOX_LIVE,
            substitute_model=MODEL,
            # the tool call, then the answer that reads the team's result
            max_loop_calls=2,
            candidates=candidates,
            tools_module=pin,
        )
        async with running_workers(settings, "all", client):
            await start_replay(
                lambda: _same(client), stores, plan, catalogs=deployment_catalogs(settings)
            )
            outcome = await client.get_workflow_handle(
                plan.replay_id, result_type=ReplayOutcome
            ).result()
        print(f"\nreplay {plan.replay_id}: {outcome.verdict} ({outcome.verdict_reason})")

        events = await stores.ledger.events(plan.replay_id)
        kinds = {e.type for e in events}
        payloads = [
            (e.type, json.loads(await stores.ledger.payload(e)))
            for e in events
            if e.type in (ExecutionEventType.STEP_STARTED, ExecutionEventType.FIXTURE_MISS)
        ]
        # the replay ran in the sandbox and ended with a verdict, the module pinned
        assert outcome.verdict is not None and outcome.verdict_reason, outcome
        assert outcome.manifest is not None and outcome.manifest.tools_module == pin
        isolations = {
            p.get("isolation") for t, p in payloads if t is ExecutionEventType.STEP_STARTED
        }
        assert isolations == {"bubblewrap"}
        # the model asked for the READ tool the recording never saw; the team's code answered
        misses = [p for t, p in payloads if t is ExecutionEventType.FIXTURE_MISS]
        assert misses and misses[0]["capability_id"] == "shipping_status", (kinds, misses)
        assert misses[0]["answered_by"] == pin.label()
        fixtures = await stores.evidence.records(ToolFixture, plan.replay_id)
        answered = [f for f in fixtures if f.capability_id == "shipping_status"]
        answer = answered[0].sanitized_response
        assert isinstance(answer, dict) and answer["answered_by"] == ANSWERED_BY
        assert answer["sandbox_live"] is True
        # the model was sent the team's answer in its next call
        calls = [
            json.loads(await stores.ledger.payload(e))
            for e in events
            if e.type is ExecutionEventType.MODEL_CALL
        ]
        assert len(calls) == 2 and all("sent_request_ref" in c for c in calls)
        sent = (await stores.artifacts.get(calls[-1]["sent_request_ref"])).decode()
        assert ANSWERED_BY in sent and STARTED.isoformat() in sent
        # at the recorded run's logical time, not today's
        assert answer["as_of"] == STARTED.isoformat()
        assert outcome.manifest.logical_time == STARTED
        assert ExecutionEventType.WRITE_BLOCKED not in kinds or outcome.writes_executed == 0


async def _same(client: Client) -> Client:
    return client
