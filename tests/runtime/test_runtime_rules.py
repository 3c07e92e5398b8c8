"""Runtime rules on the real ledger: approvals, clock, graph versions, state migration, retries."""

from __future__ import annotations

import json
import random
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from examples.support_desk.agent import CAPABILITIES, POLICIES, WRITE_POLICY
from models import (
    ApprovalDecision,
    ExecutionEventType,
    PolicyDecision,
    RunRecord,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolOutcome,
)
from models.capability import Capability, side_effect_class_from_hints
from models.errors import (
    ApprovalDeniedError,
    ApprovalExpiredError,
    ApprovalMismatchError,
    ApprovalMissingError,
    GraphNotFoundError,
    ProviderRejectedError,
    RetryNotAllowedError,
    StateMigrationError,
    UnknownCapabilityError,
)
from runtime.approvals import RecordingApprovalGateway, action_hash
from runtime.capabilities import CapabilityRegistry
from runtime.clock import SystemAgentClock
from runtime.executor import migrate_recorded_state
from runtime.graph import GraphDefinition, GraphRegistry, StepResult
from runtime.policy import RecordingPolicyEngine
from runtime.recorder import RunRecorder
from runtime.side_effects import retry_side_effect
from runtime.tools import RecordingToolGateway

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)


class FakeTime:
    """A settable time source for the recording clock (the agent still reads it via the clock)."""

    def __init__(self, start: datetime) -> None:
        self.value = start

    def __call__(self) -> datetime:
        return self.value


class Approver:
    def __init__(
        self,
        decision: ApprovalDecision = ApprovalDecision.APPROVED,
        validity: timedelta = timedelta(minutes=15),
    ) -> None:
        self.decision, self.validity = decision, validity

    async def review(self, capability_id, arguments):
        return "lead@acme", self.decision, self.validity


async def _setup(rec, time: FakeTime, approver: Approver | None = None):
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await rec.ledger.create_run(
        RunRecord(run_id=run_id, graph_id="test", graph_version="1", created_at=T0)
    )
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    recorder.clock = SystemAgentClock(on_read=recorder.buffer_clock_read, source=time)
    recorder.step_id = "act"
    policy = RecordingPolicyEngine(POLICIES, recorder)
    providers = {
        "crm.get_customer": rec.world.crm_get_customer,
        "crm.find_by_phone": rec.world.crm_find_by_phone,
        "payment.refund": rec.world.payment_refund,
        "email.send": rec.world.email_send,
    }
    tools = RecordingToolGateway(CAPABILITIES, providers, recorder, policy, WRITE_POLICY)
    approvals = RecordingApprovalGateway(approver or Approver(), recorder)
    return run_id, recorder, tools, approvals


REFUND = {"order_id": "O-9", "amount": 120, "currency": "EUR"}


async def _refused(rec, run_id: str) -> list[dict]:
    events = [
        e for e in await rec.ledger.events(run_id) if e.type is ExecutionEventType.ACTION_REFUSED
    ]
    return [json.loads(await rec.ledger.payload(e)) for e in events]


async def test_an_approval_is_bound_to_its_action_and_its_validity(rec) -> None:
    time = FakeTime(T0)
    run_id, _, tools, approvals = await _setup(rec, time)
    refund = {**REFUND, "order_id": f"O-{uuid.uuid4().hex[:6]}"}
    calls_before = await rec.world.call_count("payments")

    with pytest.raises(ApprovalMissingError):
        await tools.call("payment.refund", refund)

    approval = await approvals.request("payment.refund", refund)
    assert approval.action_hash == action_hash("payment.refund", refund)

    other = {**refund, "amount": 499}
    with pytest.raises(ApprovalMismatchError, match="granted for action"):
        await tools.call("payment.refund", other, approval=approval)

    time.value = T0 + timedelta(minutes=16)
    with pytest.raises(ApprovalExpiredError, match="expired at"):
        await tools.call("payment.refund", refund, approval=approval)

    refused = await _refused(rec, run_id)
    assert [r["error"] for r in refused] == [
        "ApprovalMissingError",
        "ApprovalMismatchError",
        "ApprovalExpiredError",
    ]
    assert await rec.world.call_count("payments") == calls_before  # nothing reached the provider

    time.value = T0 + timedelta(minutes=17)
    fresh = await approvals.request("payment.refund", refund)
    result = await tools.call("payment.refund", refund, approval=fresh)
    assert (
        result.outcome is ToolOutcome.SUCCESS
        and result.side_effect.status is SideEffectStatus.CONFIRMED
    )
    assert (await rec.ledger.verify(run_id)).intact


async def test_a_denied_approval_refuses_the_action(rec) -> None:
    run_id, _, tools, approvals = await _setup(rec, FakeTime(T0), Approver(ApprovalDecision.DENIED))
    refund = {**REFUND, "order_id": f"O-{uuid.uuid4().hex[:6]}"}
    approval = await approvals.request("payment.refund", refund)
    with pytest.raises(ApprovalDeniedError, match="denied by lead@acme"):
        await tools.call("payment.refund", refund, approval=approval)
    assert [r["error"] for r in await _refused(rec, run_id)] == ["ApprovalDeniedError"]


async def test_policy_deny_is_recorded_and_refused(rec) -> None:
    from models.errors import PolicyDeniedError

    run_id, _, tools, _ = await _setup(rec, FakeTime(T0))
    with pytest.raises(PolicyDeniedError, match="above the 500 EUR limit"):
        await tools.call("payment.refund", {**REFUND, "amount": 900})
    decisions = [
        e for e in await rec.ledger.events(run_id) if e.type is ExecutionEventType.POLICY_DECISION
    ]
    assert len(decisions) == 1
    assert (
        json.loads(await rec.ledger.payload(decisions[0]))["decision"] == PolicyDecision.DENY.value
    )


async def test_bad_arguments_are_a_recorded_tool_error_not_a_call(rec) -> None:
    _, _, tools, _ = await _setup(rec, FakeTime(T0))
    before = await rec.world.call_count("crm")
    result = await tools.call("crm.get_customer", {"id": 5})
    assert result.outcome is ToolOutcome.ERROR
    assert "customer_id" in result.response["error"]
    assert await rec.world.call_count("crm") == before
    with pytest.raises(UnknownCapabilityError, match=r"crm\.delete"):
        await tools.call("crm.delete", {})


async def test_clock_reads_are_recorded_in_order(rec) -> None:
    time = FakeTime(T0)
    run_id, recorder, tools, _ = await _setup(rec, time)
    first = recorder.clock.now()
    time.value = T0 + timedelta(seconds=90)
    second = recorder.clock.now()
    await tools.call("crm.get_customer", {"customer_id": "C-1001"})
    events = await rec.ledger.events(run_id)
    reads = [e for e in events if e.type is ExecutionEventType.CLOCK_READ]
    assert [json.loads(await rec.ledger.payload(e))["value"] for e in reads] == [
        "2026-08-20T10:15:00.000000Z",
        "2026-08-20T10:16:30.000000Z",
    ]
    assert (first, second) == (T0, T0 + timedelta(seconds=90))
    assert [e.type for e in events][:2] == [
        ExecutionEventType.CLOCK_READ,
        ExecutionEventType.CLOCK_READ,
    ]


def test_agent_code_never_reads_the_system_clock() -> None:
    pattern = re.compile(r"datetime\.now\(|datetime\.utcnow\(|time\.time\(|date\.today\(")
    offenders = []
    for folder in ("examples", "runtime"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "clock.py":
                continue
            # the simulated providers, and the e-mail outbox's relay, broker and consumer, are
            # the outside world, not agent code
            if path.name in ("providers.py", "outbox.py") and "examples" in path.parts:
                continue
            offenders += [
                f"{path.relative_to(ROOT)}:{n}"
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if pattern.search(line)
            ]
    assert offenders == []


async def _noop(env, state, agent_input):
    return StepResult(state, None)


def test_graph_v1_stays_loadable_after_v2() -> None:
    registry = GraphRegistry()
    v1 = registry.register(GraphDefinition("desk", "1", "a", {"a": _noop}))
    v2 = registry.register(GraphDefinition("desk", "2", "b", {"b": _noop}))
    assert registry.get("desk", "1") is v1 and registry.get("desk", "2") is v2
    assert registry.versions("desk") == ["1", "2"]
    with pytest.raises(GraphNotFoundError, match="versions: 1, 2"):
        registry.get("desk", "3")


async def test_recorded_v1_run_resolves_its_graph_after_v2(rec) -> None:
    from examples.support_desk.agent import GRAPHS, SUPPORT_DESK_V1
    from examples.support_desk.spec import run_scenario

    result = await run_scenario(rec.world, rec.ledger, rec.artifacts, "happy", seed=1)
    registry = GraphRegistry()
    registry.register(SUPPORT_DESK_V1)
    registry.register(GraphDefinition("support-desk", "2", "planner", {"planner": _noop}))
    run = await rec.ledger.get_run(result.run_id)
    assert registry.get(run.graph_id, run.graph_version) is SUPPORT_DESK_V1
    assert GRAPHS.get("support-desk", "1") is SUPPORT_DESK_V1


def _goal_to_objective(state):
    return {"objective": state["goal"], "steps": state.get("plan", [])}


async def test_state_migration_keeps_raw_and_migrated_snapshots(rec) -> None:
    v2 = GraphDefinition(
        "planner",
        "2",
        "a",
        {"a": _noop},
        state_schema_version=2,
        migrations={1: _goal_to_objective},
    )
    run_id, recorder, _, _ = await _setup(rec, FakeTime(T0))
    raw = {"goal": "refund order O-1", "plan": ["lookup", "refund"]}
    migrated = await migrate_recorded_state(v2, recorder, raw, recorded_schema_version=1)
    assert migrated == {"objective": "refund order O-1", "steps": ["lookup", "refund"]}
    (event,) = [
        e for e in await rec.ledger.events(run_id) if e.type is ExecutionEventType.STATE_MIGRATION
    ]
    payload = json.loads(await rec.ledger.payload(event))
    assert payload["migration_version"] == "1->2"
    assert json.loads(await rec.artifacts.get(payload["raw_state_ref"])) == raw
    assert json.loads(await rec.artifacts.get(payload["migrated_state_ref"])) == migrated
    # already current: nothing to migrate, nothing recorded
    assert (
        await migrate_recorded_state(v2, recorder, migrated, recorded_schema_version=2) == migrated
    )
    v3 = GraphDefinition(
        "planner",
        "3",
        "a",
        {"a": _noop},
        state_schema_version=3,
        migrations={1: _goal_to_objective},
    )
    with pytest.raises(StateMigrationError, match="no migration from state schema 2 to 3"):
        await migrate_recorded_state(v3, recorder, raw, recorded_schema_version=1)


async def test_only_a_write_proved_not_applied_is_retried_with_its_key(rec) -> None:
    run_id, recorder, tools, _ = await _setup(rec, FakeTime(T0))
    attempts: list[str] = []

    async def flaky(arguments, context):
        attempts.append(context.idempotency_key)
        if len(attempts) == 1:
            raise ProviderRejectedError("card network unavailable, nothing charged")
        return {"receipt": "rf-1"}

    tools.providers = {**tools.providers, "payment.refund": flaky}
    result = await tools.call("payment.refund", {**REFUND, "amount": 20})
    assert (
        result.side_effect.status is SideEffectStatus.FAILED and result.outcome is ToolOutcome.ERROR
    )

    async def again(key: str, preq: str) -> dict:
        return await flaky({}, type("C", (), {"idempotency_key": key})())

    final, _ = await retry_side_effect(
        rec.evidence, recorder, result.side_effect.side_effect_id, again
    )
    assert final.status is SideEffectStatus.CONFIRMED
    assert attempts[0] == attempts[1]  # the same idempotency key
    stored = await rec.evidence.record(SideEffectRecord, final.side_effect_id)
    assert stored.status is SideEffectStatus.CONFIRMED
    with pytest.raises(RetryNotAllowedError, match="CONFIRMED"):
        await retry_side_effect(rec.evidence, recorder, final.side_effect_id, again)
    assert len(attempts) == 2
    assert (await rec.ledger.verify(run_id)).intact


def test_capability_hints_and_registry() -> None:
    assert side_effect_class_from_hints(True) is SideEffectClass.READ
    assert side_effect_class_from_hints(True, destructive_hint=True) is SideEffectClass.WRITE
    assert side_effect_class_from_hints(None) is SideEffectClass.WRITE
    assert side_effect_class_from_hints(False) is SideEffectClass.WRITE
    assert (
        Capability(capability_id="x").side_effect_class is SideEffectClass.WRITE
    )  # unknown is WRITE
    registry = CapabilityRegistry("r1", [Capability(capability_id="a", schema_={"type": "object"})])
    changed = CapabilityRegistry(
        "r1", [Capability(capability_id="a", schema_={"type": "object", "required": ["q"]})]
    )
    assert registry.catalog_hash() != changed.catalog_hash()
    assert random.Random(3).random() == random.Random(3).random()
