"""A team's own read-only tools in the sandbox (issue 32, item 3).

An ingested run of the desk recorded one answer and no tool call. A candidate system prompt
makes the model (a scripted chat-completions server over real HTTP: deterministic) ask for
``refund`` (WRITE) and ``shipping_status`` (READ, never seen by the recording). The replay's
steps run in bubblewrap as on a worker: the READ miss is answered by the team's module
(``examples.live.desk_replay_tools``) imported and called inside the sandbox child, at the
run's logical time as the worker's guard grants it; the WRITE is a dry run and its function is
never called (it raises if it is, which would fail the step). Unit tests cover the contract's
refusals, each one line naming the problem."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from activities.sandbox.config import SandboxSettings
from activities.sandbox.setup import sandboxed_steps
from app.candidates import store_candidates
from app.local_replay import run_prepared
from app.replay_checks import check_replay_plan, pin_tools_module
from examples.live import desk_replay_tools
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode, ToolFixture
from models.errors import FixtureMissError, InvalidInputError
from models.replay_plans import PLAN_FIELDS, build_replay_plan
from runtime.providers.registry import ModelRegistrySettings
from runtime.replay.engine import ReplayEngine
from runtime.team_tools import load_team_tools, pin_problem, pinned_team_tools
from runtime.tools import ToolCallContext
from stores.bundle import Stores, open_stores
from tests.fixtures_replay import stack_settings
from tests.fixtures_team_tools import MODULE, RULE, STARTED, ingest_desk_run
from tests.runtime.chat_server import ChatServer, Scripted, text_answer, tool_call_answer
from worker.catalogs import catalogs
from worker.temporal import CATALOG_FACTORY

E = ExecutionEventType
ORDER = json.dumps({"order_id": "A-1001"})


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[Stores]:
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


def scripted_model(body: Any) -> Scripted:
    """With ``RULE`` in its system prompt and no tool result yet: a refund and the parcel's
    status; else a short answer."""
    messages = body["messages"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if RULE in system and not any(m["role"] == "tool" for m in messages):
        refund = json.dumps({"order_id": "A-1001", "amount": 25.0})
        return tool_call_answer(("c1", "refund", refund), ("c2", "shipping_status", ORDER))
    return text_answer("The parcel arrived damaged; your refund is on its way.", prompt_tokens=30)


async def payloads(stores: Stores, run_id: str, kind: ExecutionEventType) -> list[Any]:
    events = await stores.ledger.events(run_id)
    return [json.loads(await stores.ledger.payload(e)) for e in events if e.type is kind]


async def test_a_read_miss_is_answered_by_the_teams_code_in_the_sandbox(stores: Stores) -> None:
    run_id = await ingest_desk_run(stores, f"desk-{uuid.uuid4().hex[:8]}", "scripted")
    candidate = await store_candidates(
        stores.artifacts, system_prompt=f"{RULE}\n\n{desk_replay_tools.__doc__}"
    )
    pin = pin_tools_module(MODULE, "--tools-module")
    assert pin.read_tools == ("lookup_order", "shipping_status")  # refund is WRITE: left out
    with ChatServer() as server:
        server.answer_with = scripted_model
        registry = ModelRegistrySettings.model_validate(
            {
                "REPLAYBOOK_MODELS": json.dumps(
                    {"scripted": {"base_url": server.base_url, "model_id": "m"}}
                )
            }
        )
        agents = catalogs(None, None, registry)
        engine = ReplayEngine(stores.ledger, stores.evidence, stores.artifacts, agents)
        # the steps run in bubblewrap, as on a worker (a runner with the engine's interface)
        runner: Any = sandboxed_steps(
            engine, SandboxSettings(warm_processes=0), catalog_factory=CATALOG_FACTORY
        )
        assert runner is not None
        plan = build_replay_plan(
            run_id,
            ReplayMode.PROMPT_SWAP,
            replay_id=f"replay-team-{uuid.uuid4().hex[:8]}",
            sampling_seed=1,
            system_prompt=candidate["system_prompt"],
            substitute_model="scripted",
            miss=FixtureMissPolicy.SANDBOX_LIVE,
            tools_module=pin,
        )
        try:
            await check_replay_plan(stores, plan, agents, PLAN_FIELDS)  # as both faces do
            prepared = await engine.prepare(plan)
            assert prepared.ok, prepared.problems
            totals = await run_prepared(runner, plan, prepared)
        finally:
            for model in {id(m): m for m in agents["tool-loop"].models.values()}.values():
                await model.aclose()  # type: ignore[attr-defined]
            await runner.aclose()
    assert totals.stopped is None, totals.stopped  # ran to its answer: refund never called

    started = await payloads(stores, plan.replay_id, E.STEP_STARTED)
    assert {s.get("isolation") for s in started} == {"bubblewrap"}
    (manifest,) = [p["manifest"] for p in await payloads(stores, plan.replay_id, E.RUN_STARTED)]
    assert manifest["tools_module"]["module"] == MODULE
    assert manifest["tools_module"]["digest"] == pin.digest
    # the miss is recorded as answered by the pinned module
    (miss,) = await payloads(stores, plan.replay_id, E.FIXTURE_MISS)
    assert miss["capability_id"] == "shipping_status" and miss["policy"] == "SANDBOX_LIVE"
    assert miss["answered_by"] == pin.label()
    # the team's answer, computed in the sandbox at the run's logical time (not today's)
    calls = {f.capability_id: f for f in await stores.evidence.records(ToolFixture, plan.replay_id)}
    answer = calls["shipping_status"].sanitized_response
    assert isinstance(answer, dict)
    assert answer["answered_by"] == desk_replay_tools.ANSWERED_BY and answer["sandbox_live"]
    assert answer["as_of"] == STARTED.isoformat() and answer["damaged_on_arrival"] is True
    # the WRITE: a dry run, never the team's function
    (blocked,) = await payloads(stores, plan.replay_id, E.WRITE_BLOCKED)
    assert blocked["capability_id"] == "refund" and blocked["answered_with"] == "dry_run"
    assert calls["refund"].outcome.value == "DRY_RUN"


def test_a_write_tool_of_the_module_is_never_offered_to_a_replay() -> None:
    team = load_team_tools(MODULE)

    async def gate(tool: str, arguments: dict[str, Any], context: Any) -> Any:
        return context.logical_time

    assert team.writes == ("refund",) and "refund" not in team.reads
    assert set(team.providers(gate)) == {"lookup_order", "shipping_status"}
    assert desk_replay_tools.REFUND_CALLS == []
    assert pinned_team_tools(team.pin) is team  # imported once per process


def _module(folder: Path, name: str, text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    (folder / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(folder))
    sys.modules.pop(name, None)
    return name


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (None, "--tools-module no_such_team_module: cannot import no_such_team_module"),
        ("raise ImportError('broken')", "cannot import {name}: ImportError: broken"),
        ("X = 1", "{name} defines no REPLAYBOOK_TOOLS"),
        (
            "REPLAYBOOK_TOOLS = {'a': {'effect': 'MAYBE', 'call': print}}",
            "tool 'a' of {name} declares effect 'MAYBE' (READ or WRITE)",
        ),
        ("REPLAYBOOK_TOOLS = {'a': {'effect': 'READ'}}", "tool 'a' of {name} must be"),
        (
            "REPLAYBOOK_TOOLS = {'a': {'effect': 'WRITE', 'call': print}}",
            "{name} declares no READ tool",
        ),
    ],
)
def test_a_module_that_breaks_the_contract_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str | None, problem: str
) -> None:
    name = f"team_{uuid.uuid4().hex[:8]}"
    if text is None:
        name = "no_such_team_module"
    else:
        _module(tmp_path, name, text, monkeypatch)
    with pytest.raises(InvalidInputError) as caught:
        pin_tools_module(name, "--tools-module")
    message = str(caught.value)
    assert problem.format(name=name) in message and "\n" not in message
    assert caught.value.field == "--tools-module"
    with pytest.raises(InvalidInputError, match="neither a module path"):
        pin_tools_module("not a/module", "toolsModule")


async def test_a_module_that_does_not_fit_the_run_is_refused(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await ingest_desk_run(stores, f"desk-{uuid.uuid4().hex[:8]}", "scripted")

    def plan_with(text: str, miss: FixtureMissPolicy = FixtureMissPolicy.SANDBOX_LIVE) -> Any:
        name = _module(tmp_path, f"team_{uuid.uuid4().hex[:8]}", text, monkeypatch)
        return build_replay_plan(
            run_id,
            ReplayMode.EXACT,
            replay_id=f"replay-{uuid.uuid4().hex[:8]}",
            sampling_seed=1,
            miss=miss,
            tools_module=pin_tools_module(name, "--tools-module"),
        )

    unknown = "REPLAYBOOK_TOOLS = {'weather': {'effect': 'READ', 'call': print}}"
    with pytest.raises(InvalidInputError, match=r"tool 'weather' is not in run .*'s tool cat"):
        await check_replay_plan(stores, plan_with(unknown), None, PLAN_FIELDS)
    write = "REPLAYBOOK_TOOLS = {'refund': {'effect': 'READ', 'call': print}}"
    with pytest.raises(InvalidInputError, match="tool 'refund' is WRITE in run"):
        await check_replay_plan(stores, plan_with(write), None, PLAN_FIELDS)
    fine = "REPLAYBOOK_TOOLS = {'lookup_order': {'effect': 'READ', 'call': print}}"
    with pytest.raises(InvalidInputError, match="only under miss_policy SANDBOX_LIVE"):
        plan_with(fine, FixtureMissPolicy.FAIL)
    await check_replay_plan(stores, plan_with(fine), None, PLAN_FIELDS)  # accepted


def test_a_distribution_registers_its_module_under_an_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a distribution as pip installs it: its metadata with a replaybook.tools entry point
    info = tmp_path / "acme_desk-1.4.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-desk\nVersion: 1.4.0\n")
    (info / "entry_points.txt").write_text(f"[replaybook.tools]\nacme-desk = {MODULE}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pin = pin_tools_module("acme-desk", "--tools-module")
    assert (pin.module, pin.entry_point) == (MODULE, "acme-desk")
    assert pin.digest == pin_tools_module(MODULE, "--tools-module").digest
    with pytest.raises(InvalidInputError, match=r"\(acme-desk\)"):
        pin_tools_module("acme desk", "--tools-module")  # the known names are listed


def test_a_module_whose_files_changed_since_the_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "def a(arguments, context):\n    return {}\n\nREPLAYBOOK_TOOLS = {'a': {'effect': 'READ', 'call': a}}\n"
    name = _module(tmp_path, f"team_{uuid.uuid4().hex[:8]}", text, monkeypatch)
    pin = pin_tools_module(name, "--tools-module")
    assert pin_problem(pin) is None
    (tmp_path / f"{name}.py").write_text(text + "# edited\n")
    assert "is not the pinned one" in (pin_problem(pin) or "")  # the worker: PREPARING
    unseen = pin.model_copy(update={"module": f"{name}:REPLAYBOOK_TOOLS"})
    with pytest.raises(InvalidInputError, match="changed since the replay was planned"):
        pinned_team_tools(unseen)  # the sandboxed child, before it imports anything


async def test_the_gate_checks_the_module_against_each_tool_loop_case(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.regression import _case_tools

    run_id = await ingest_desk_run(stores, f"desk-{uuid.uuid4().hex[:8]}", "scripted")
    case: Any = SimpleNamespace(case_id="case-1", source_run_id=run_id)
    live = FixtureMissPolicy.SANDBOX_LIVE
    desk = pin_tools_module(MODULE, "--tools-module")
    assert await _case_tools(stores, case, [("prompt", "v2")], live, desk) == desk
    assert await _case_tools(stores, case, [], live, None) is None
    name = _module(
        tmp_path,
        f"team_{uuid.uuid4().hex[:8]}",
        "REPLAYBOOK_TOOLS = {'weather': {'effect': 'READ', 'call': print}}",
        monkeypatch,
    )
    other = pin_tools_module(name, "--tools-module")
    with pytest.raises(InvalidInputError, match=r"--tools-module .*tool 'weather' is not in"):
        await _case_tools(stores, case, [], live, other)
    with pytest.raises(InvalidInputError, match=r"sandbox-live miss policy \(here FAIL\)"):
        await _case_tools(stores, case, [], FixtureMissPolicy.FAIL, desk)


async def test_a_tool_that_raises_leaves_the_miss_unanswered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        "def down(arguments, context):\n    raise ConnectionError('no network here')\n\n"
        "async def odd(arguments, context):\n    return ['not', 'an', 'object']\n\n"
        "REPLAYBOOK_TOOLS = {'down': {'effect': 'READ', 'call': down},\n"
        "                    'odd': {'effect': 'READ', 'call': odd}}\n"
    )
    name = _module(tmp_path, f"team_{uuid.uuid4().hex[:8]}", text, monkeypatch)

    async def gate(tool: str, arguments: dict[str, Any], context: Any) -> Any:
        return STARTED

    providers = load_team_tools(name).providers(gate)
    context = ToolCallContext(run_id="replay-1", logical_time=STARTED)
    # a stopping error: the replay ends with what it had, INCONCLUSIVE, and says why
    with pytest.raises(FixtureMissError, match=r"tool 'down' of .* raised ConnectionError"):
        await providers["down"]({}, context)
    with pytest.raises(InvalidInputError, match="returned list, not a JSON object"):
        await providers["odd"]({}, context)
