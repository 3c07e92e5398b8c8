"""Candidates for an agent Replaybook did not write (issue 32, item 2): a new compiled system
prompt (``--system-prompt-file``) and a changed tool catalogue (``--tools-file``) swapped into
a replay of an imported tau-bench run. The model is a scripted chat-completions server (real
HTTP) whose answer depends on the system prompt it is sent, so the behaviour change is the
candidate's and nothing else's: with the recorded prompt it answers, with the candidate it
first looks the user up. The candidate is stored as an artifact, pinned by digest in the
replay's manifest, and the comparison (the report's side-by-side view) shows it with a
unified diff beside the new tool call."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from activities.sandbox.config import SandboxSettings
from activities.sandbox.setup import sandboxed_steps
from app.candidates import store_candidates, tool_loop_problem, tools_catalog_bytes
from app.local_replay import run_prepared
from forensics.report import render_markdown
from integrations.tau_bench.world.live import TauWorlds
from models import FixtureMissPolicy, ReplayMode
from models.comparison import compare_trajectories
from models.enums import DiffType
from models.errors import InvalidInputError
from models.incident import FailureForensicsReport
from models.replay_flow import ReplayPlan
from models.replay_plans import build_replay_plan
from models.report_bundle import ReportBundle
from runtime.providers.registry import ModelRegistrySettings
from runtime.replay.engine import ReplayEngine
from runtime.trajectory import load_trajectory
from stores.bundle import Stores, open_stores
from tests.fixtures_replay import stack_settings
from tests.fixtures_tau import ENV_DATA, import_shortest_airline_run
from tests.runtime.chat_server import ChatServer, Scripted, text_answer, tool_call_answer
from worker.catalogs import catalogs
from worker.temporal import CATALOG_FACTORY

#: what the candidate system prompt adds, and what the scripted model does when it sees it
RULE = "Before answering, always look the user up with get_user_details."
USER = "anya_garcia_5901"


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


def scripted_model(body: Any) -> Scripted:
    """Answers by its system prompt: with ``RULE`` and no tool result yet, a tool call; else
    a short text answer."""
    messages = body["messages"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    looked_up = any(m["role"] == "tool" for m in messages)
    if RULE in system and not looked_up:
        return tool_call_answer(("call-1", "get_user_details", json.dumps({"user_id": USER})))
    return text_answer("You can take 3 suitcases in total.", prompt_tokens=40)


async def _replay(engine: ReplayEngine, runner: Any, plan: ReplayPlan) -> None:
    prepared = await engine.prepare(plan)
    assert prepared.ok, prepared.problems
    totals = await run_prepared(runner, plan, prepared)
    assert totals.stopped is None, totals.stopped  # each ran to the conversation's end


async def test_a_system_prompt_candidate_changes_a_tool_loop_replay(
    stores: Stores, tmp_path: Path
) -> None:
    run_id = await import_shortest_airline_run(stores, tmp_path)
    source_run = await stores.ledger.get_run(run_id)
    recorded = (await stores.artifacts.get(source_run.pinned.prompt_bundle_hash or "")).decode()
    worlds = TauWorlds(stores.ledger, stores.artifacts, stores.evidence, ENV_DATA)
    candidate_text = f"{RULE}\n\n{recorded}"
    digests = await store_candidates(stores.artifacts, system_prompt=candidate_text)
    with ChatServer() as server:
        server.answer_with = scripted_model
        registry = ModelRegistrySettings.model_validate(
            {
                "REPLAYBOOK_MODELS": json.dumps(
                    {"scripted": {"base_url": server.base_url, "model_id": "m"}}
                )
            }
        )
        agents = catalogs(None, None, registry, worlds)
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, agents)
        # the steps run in the sandbox, as on a worker: the child reads the candidate's text
        # through the broker by its digest
        runner = sandboxed_steps(
            engine, SandboxSettings(warm_processes=0), catalog_factory=CATALOG_FACTORY
        )
        assert runner is not None
        plans = [
            build_replay_plan(
                run_id,
                ReplayMode.PROMPT_SWAP if swap else ReplayMode.MODEL_SWAP,
                replay_id=f"replay-{'candidate' if swap else 'recorded'}-{uuid.uuid4().hex[:8]}",
                sampling_seed=7,
                model=None if swap else "scripted",
                # the run recorded no model: the candidate's replay names one to call
                substitute_model="scripted" if swap else None,
                system_prompt=digests["system_prompt"] if swap else None,
                miss=FixtureMissPolicy.SANDBOX_LIVE,
            )
            for swap in (False, True)
        ]
        try:
            for plan in plans:
                await _replay(engine, runner, plan)
        finally:
            for model in {id(m): m for m in agents["tool-loop"].models.values()}.values():
                await model.aclose()  # type: ignore[attr-defined]
            await runner.aclose()
        sent = server.bodies

    baseline, candidate = plans
    # the candidate's text was sent (never carried in the plan: only its digest is)
    assert digests["system_prompt"].startswith("sha256:") and RULE not in baseline.model_dump_json()
    systems = [b["messages"][0]["content"] for b in sent]
    assert any(RULE in s for s in systems) and any(RULE not in s for s in systems)
    # pinned in the candidate replay's manifest; the baseline has none
    started = await stores.ledger.events(candidate.replay_id)
    manifest = json.loads(await stores.ledger.payload(started[0]))["manifest"]
    assert manifest["candidate_system_prompt"] == digests["system_prompt"]
    assert manifest["prompt_bundle_hash"] == digests["system_prompt"]
    first = json.loads(
        await stores.ledger.payload((await stores.ledger.events(baseline.replay_id))[0])
    )
    assert first["manifest"].get("candidate_system_prompt") is None

    source = await load_trajectory(stores.ledger, run_id)
    same = compare_trajectories(source, await load_trajectory(stores.ledger, baseline.replay_id))
    swapped_trajectory = await load_trajectory(stores.ledger, candidate.replay_id)
    swapped = compare_trajectories(source, swapped_trajectory)
    # the behaviour changed with the prompt: a tool call the recording never made
    assert [
        t.capability_id for t in swapped_trajectory.tool_calls if t.capability_id != "user.reply"
    ] == ["get_user_details"]
    assert not any(d.type is DiffType.CANDIDATE_CHANGED for d in same.diffs)
    assert not any(d.type is DiffType.TOOL_CHANGED for d in same.diffs)
    assert any(d.type is DiffType.TOOL_CHANGED for d in swapped.diffs), swapped.diffs
    (shown,) = [d for d in swapped.diffs if d.type is DiffType.CANDIDATE_CHANGED]
    assert shown.replay_prompt_hash == digests["system_prompt"]
    assert shown.source_prompt_hash == source_run.pinned.prompt_bundle_hash
    assert f"+{RULE}" in (shown.prompt_diff or "")
    # the report's side-by-side view shows the candidate and the new tool call
    report = render_markdown(
        ReportBundle(
            report=FailureForensicsReport(
                incident_id="INC-candidate", source_run_id=run_id, failure_signature="UNSIGNED"
            ),
            source=source,
            replay=swapped_trajectory,
        )
    )
    assert "candidate system prompt" in report and "get_user_details" in report


def test_tool_catalogues_are_checked_and_only_for_tool_loops() -> None:
    openai_form = [
        {
            "type": "function",
            "function": {
                "name": "get_user_details",
                "description": "Look a user up",
                "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}},
            },
        },
        {"name": "book", "description": "Book a flight", "side_effect_class": "WRITE"},
        {"name": "peek", "read_only_hint": True},
    ]
    tools = json.loads(tools_catalog_bytes(json.dumps(openai_form), "--tools-file"))
    assert [(t["name"], t["side_effect_class"]) for t in tools] == [
        ("get_user_details", "WRITE"),  # says neither READ nor WRITE: never called live
        ("book", "WRITE"),
        ("peek", "READ"),
    ]
    with pytest.raises(InvalidInputError, match="--tools-file: tool 'book' is listed twice"):
        tools_catalog_bytes(json.dumps([{"name": "book"}, {"name": "book"}]), "--tools-file")
    with pytest.raises(InvalidInputError, match="--tools-file: expected a JSON list"):
        tools_catalog_bytes('{"name": "x"}', "--tools-file")
    assert tool_loop_problem("tool-loop", "system_prompt") is None
    assert "prompt bundle" in (tool_loop_problem("support-desk", "tools") or "")
