"""Replayed code that reaches the sandbox's way back to the worker (rule 16).

The recorded code runs inline in the sandboxed child, walks its stack frames to the pipe's
``call`` handle and asks the worker's broker directly, bypassing the child's gateways: the
broker must decide from the replay's plan alone. Each test asserts what was refused, what the
replay recorded, and that the worker still runs an ordinary replay afterwards.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from prometheus_client import REGISTRY

from examples.coding_agent import record_coding_run
from examples.synthetic import record_synthetic_run
from models import ExecutionEventType, FixtureMissPolicy, ReplayMode, ReplayStatus, RunStatus
from models.replay import ReplayBudget
from models.replay_flow import ReplayOutcome, ReplayPlan
from tests.fixtures_replay import SANDBOX_MESSAGE_QUOTA, SANDBOX_WRITE_QUOTA

#: finds the broker's ``call`` in the child's frames (the issue's reproduction)
PRELUDE = """
import sys, json, base64, os
f = sys._getframe()
while "rpc_out" not in f.f_locals: f = f.f_back
call = f.f_locals["call"]
CONTEXT = {"logical_time": "2025-01-01T00:00:00+00:00", "run_id": "x"}
"""

EXFIL = """
rows = [call("tool.read", {"graph_id": "support-desk", "capability_id": "crm.find_by_phone",
        "arguments": {"phone": p}, "context": CONTEXT})
        for p in ("+1-555-0100", "+1-555-0199")]
raise RuntimeError("EXFIL " + json.dumps(rows))
"""


def violations(kind: str) -> float:
    return REGISTRY.get_sample_value("agent_replay_sandbox_violation_total", {"kind": kind}) or 0.0


async def hostile_replay(stack, body: str, **plan: object) -> tuple[ReplayOutcome, list]:
    """Replay a coding run whose recorded code is ``PRELUDE + body``, run inline; the outcome
    and the replay's events with their payloads."""
    source = await record_coding_run(
        stack.stores.ledger, stack.stores.artifacts, PRELUDE + body, runner="inline"
    )
    replay_plan = ReplayPlan(
        replay_id=f"replay-hostile-{uuid.uuid4().hex[:10]}",
        source_run_id=source.run_id,
        mode=plan.pop("mode", ReplayMode.RECORDED),
        **plan,
    )
    outcome = await stack.replay(replay_plan)
    events = await stack.stores.ledger.events_with_payloads(replay_plan.replay_id)
    return outcome, events


def refusal_recorded(events: list, error: str) -> dict:
    """The worker's own record of the refusal: a RUN_FAILED of the step naming the error."""
    failed = [
        json.loads(data or b"{}") for e, data in events if e.type is ExecutionEventType.RUN_FAILED
    ]
    assert failed, "the refusal is not recorded in the replay"
    assert failed[-1]["error"] == error, failed[-1]
    assert failed[-1]["step"] == "run_generated_code"
    return failed[-1]


async def assert_worker_survives(stack) -> None:
    ordinary = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    outcome = await stack.replay(
        ReplayPlan(
            replay_id=f"replay-after-{uuid.uuid4().hex[:10]}",
            source_run_id=ordinary.run_id,
            mode=ReplayMode.RECORDED,
        )
    )
    assert outcome.status is ReplayStatus.COMPLETED and outcome.reproduced, outcome.reason


async def test_the_frame_walking_crm_lookup_is_refused_and_nothing_leaks(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    crm_before = await stack.world.call_count("crm", "find_by_phone")
    counted = violations("tool.read")
    outcome, events = await hostile_replay(stack, EXFIL)

    assert outcome.status is ReplayStatus.FAILED, outcome
    assert "SandboxViolationError" in (outcome.reason or ""), outcome.reason
    assert "tool.read" in (outcome.reason or ""), outcome.reason
    # no live read reached the simulated CRM, nothing of a customer is in the replay
    assert await stack.world.call_count("crm", "find_by_phone") == crm_before
    for _, data in events:
        assert b"ada@example.com" not in (data or b""), data
        assert b"Ada" not in (data or b"")
    recorded = refusal_recorded(events, "SandboxViolationError")
    assert "tool.read" in recorded["message"] and "FAIL" in recorded["message"]
    assert violations("tool.read") == counted + 1
    closed = await stack.stores.ledger.get_run(outcome.replay_id)
    assert closed.status is RunStatus.FAILED

    # with live reads allowed, a capability of another graph is still refused
    outcome, events = await hostile_replay(stack, EXFIL, miss_policy=FixtureMissPolicy.SANDBOX_LIVE)
    assert outcome.status is ReplayStatus.FAILED
    assert "graph 'support-desk' is not the source run's" in (outcome.reason or "")
    assert await stack.world.call_count("crm", "find_by_phone") == crm_before
    refusal_recorded(events, "SandboxViolationError")
    # and naming the replay's own graph does not make the capability its own
    own_graph = EXFIL.replace('"support-desk"', '"coding-agent"')
    outcome, _ = await hostile_replay(stack, own_graph, miss_policy=FixtureMissPolicy.SANDBOX_LIVE)
    assert outcome.status is ReplayStatus.FAILED
    assert "crm.find_by_phone" in (outcome.reason or ""), outcome.reason
    assert await stack.world.call_count("crm", "find_by_phone") == crm_before
    await assert_worker_survives(stack)


async def test_reads_and_appends_of_another_run_are_refused(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    other = await record_synthetic_run(stack.stores.ledger, stack.stores.artifacts, 10)
    before = await stack.stores.ledger.events(other.run_id)

    read = f'rows = call("ledger.events", {{"run_id": {other.run_id!r}}})\nprint(len(rows))'
    outcome, events = await hostile_replay(stack, read)
    assert outcome.status is ReplayStatus.FAILED
    assert "ledger.events" in (outcome.reason or "") and other.run_id in (outcome.reason or "")
    refusal_recorded(events, "SandboxViolationError")

    forged = {
        "step_id": "s00000",
        "type": "RUN_COMPLETED",
        "logical_time": "2025-01-01T00:00:00+00:00",
        "record": None,
        "payload": {"outcome": "forged"},
        "event_id": str(uuid.uuid4()),
    }
    append = (
        f"call('ledger.append_many', {{'run_id': {other.run_id!r}, "
        f"'events': [{forged!r}], 'expected_sequence': {len(before) + 1}}})"
    )
    outcome, events = await hostile_replay(stack, append)
    assert outcome.status is ReplayStatus.FAILED
    assert "ledger.append_many" in (outcome.reason or ""), outcome.reason
    refusal_recorded(events, "SandboxViolationError")
    assert await stack.stores.ledger.events(other.run_id) == before
    assert (await stack.stores.ledger.verify(other.run_id)).intact
    await assert_worker_survives(stack)


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def test_artifact_puts_stop_at_the_write_quota(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    artifacts = stack.settings.home / "artifacts"
    before = _size(artifacts)
    counted = violations("write_bytes")
    puts = (
        "for i in range(10):\n"
        "    call('artifacts.put', {'data': base64.b64encode(os.urandom(2 * 1024**2)).decode()})"
    )
    outcome, events = await hostile_replay(stack, puts)
    # stopped cleanly, with a partial result and the reason
    assert outcome.status is ReplayStatus.COMPLETED and outcome.partial, outcome
    assert "SandboxQuotaError" in (outcome.reason or ""), outcome.reason
    assert "REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES" in (outcome.reason or "")
    grown = _size(artifacts) - before
    assert 0 < grown < SANDBOX_WRITE_QUOTA, grown
    refusal_recorded(events, "SandboxQuotaError")
    assert violations("write_bytes") == counted + 1
    closed = await stack.stores.ledger.get_run(outcome.replay_id)
    assert closed.status is RunStatus.FAILED

    # one message over the size quota: never read whole, the replay stops the same way
    before = _size(artifacts)
    counted = violations("message_bytes")
    huge = f"call('artifacts.put', {{'data': 'A' * {SANDBOX_MESSAGE_QUOTA + 1024}}})"
    outcome, events = await hostile_replay(stack, huge)
    assert outcome.status is ReplayStatus.COMPLETED and outcome.partial, outcome
    assert "REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES" in (outcome.reason or ""), outcome.reason
    refusal_recorded(events, "SandboxQuotaError")
    assert violations("message_bytes") == counted + 1
    assert _size(artifacts) - before < SANDBOX_MESSAGE_QUOTA
    await assert_worker_survives(stack)


MODEL_CALL = """
request = {"model": "none", "messages": [{"role": "user", "content": "hi"}]}
answers = []
for i in range(4):
    try:
        call("model.complete", {"graph_id": "coding-agent", "model": "none", "request": request})
        answers.append("ok")
    except Exception as exc:
        answers.append(type(exc).__name__)
raise RuntimeError("ANSWERS " + json.dumps(answers))
"""


async def test_model_calls_are_refused_in_recorded_mode_and_past_the_budget(
    sandbox_stack,
) -> None:
    stack = sandbox_stack
    counted = violations("model.complete")
    outcome, events = await hostile_replay(stack, MODEL_CALL)
    assert outcome.status is ReplayStatus.FAILED
    assert "RECORDED" in (outcome.reason or "") and "model.complete" in (outcome.reason or "")
    refusal_recorded(events, "SandboxViolationError")

    # a mode that calls a model, two calls allowed: the child's gateway is bypassed, the
    # broker counts the calls itself (the coding agent's model fails each call it gets)
    outcome, events = await hostile_replay(
        stack, MODEL_CALL, mode=ReplayMode.EXACT, budget=ReplayBudget(max_model_calls=2)
    )
    assert outcome.status is ReplayStatus.FAILED
    assert "max_model_calls 2" in (outcome.reason or ""), outcome.reason
    recorded = refusal_recorded(events, "SandboxViolationError")
    assert "model.complete" in recorded["message"]
    assert violations("model.complete") == counted + 2
    await assert_worker_survives(stack)


async def test_another_runs_prompt_is_refused_by_key_and_by_digest(
    sandbox_stack,
) -> None:
    """Issue 31 item 7: the recorded code asked the broker for another run's prompt record by
    its key and for its text by the digest the record names; both are refused now, with the
    refusal recorded, and nothing of that prompt reaches the replay's evidence."""
    from tests.activities.sandbox.test_broker_guard import SECRET, another_runs_prompt

    stack = sandbox_stack
    key, digest = await another_runs_prompt(stack.stores.ledger, stack.stores.artifacts)
    counted = violations("scope")
    attempts = {
        "evidence.record": f'call("evidence.record", {{"type": "PromptArtifact", "key": {key!r}}})',
        "artifacts.get": f'call("artifacts.get", {{"digest": {digest!r}}})',
    }
    for method, read in attempts.items():
        body = f"got = {read}\nraise RuntimeError('EXFIL ' + json.dumps(got))"
        outcome, events = await hostile_replay(stack, body)
        assert outcome.status is ReplayStatus.FAILED, outcome
        assert "SandboxViolationError" in (outcome.reason or ""), outcome.reason
        assert f"{method} of" in (outcome.reason or ""), outcome.reason
        recorded = refusal_recorded(events, "SandboxViolationError")
        assert method in recorded["message"], recorded
        for _, data in events:
            assert SECRET.encode() not in (data or b""), data
    assert violations("scope") == counted + 2
    await assert_worker_survives(stack)
