"""Recorded support-desk runs read back as trajectories and compared (SQLite and PostgreSQL)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from examples.support_desk.agent import SCENARIOS
from examples.support_desk.spec import run_scenario, support_desk_spec
from models import DiffType, ExecutionEventType, RunRecord
from models.canonical import canonical_hash
from models.comparison import compare_trajectories, reproduces
from models.errors import ApprovalDeniedError
from models.redaction import REDACT_V1, REDACT_V2, redaction_policy
from models.trajectory import Trajectory
from runtime.approvals import action_hash
from runtime.executor import RunResult
from runtime.recorder import RunRecorder
from runtime.session import record_run
from runtime.tools import request_hash
from runtime.trajectory import BLOCKED, load_trajectory

E = ExecutionEventType


async def _run(rec, scenario: str, **kwargs) -> tuple[RunResult, Trajectory]:
    result = await run_scenario(rec.world, rec.ledger, rec.artifacts, scenario, **kwargs)
    return result, await load_trajectory(rec.ledger, result.run_id)


async def _emailing_bob(rec) -> tuple[RunResult, Trajectory]:
    """A v17 wrong-customer run that looked the customer up by phone and emailed Bob."""
    for seed in range(50):
        result, trajectory = await _run(rec, "wrong-customer", seed=seed)
        if result.outcome["emailed"] == "bob@example.com":
            return result, trajectory
    raise AssertionError("no seed in 0..49 made v17 email bob@example.com")


def _check_decisions_match_calls(trajectory: Trajectory) -> None:
    """The planner's requested arguments hash as the tool calls' recorded arguments."""
    planner = trajectory.model_decisions[0]
    assert planner.step_id == "planner" and len(planner.argument_hashes) == len(planner.tool_names)
    for call in trajectory.tool_calls:
        if call.capability_id.startswith("crm."):
            index = planner.tool_names.index(call.capability_id)
            assert planner.argument_hashes[index] == canonical_hash(call.arguments)
        assert call.request_hash == request_hash(call.capability_id, call.arguments)  # type: ignore[arg-type]


async def test_happy_run_is_read_in_order_with_final_side_effects(rec) -> None:
    result, t = await _run(rec, "happy", seed=3)
    assert t.run_id == result.run_id
    assert t.steps == ("planner", "search", "crm", "reviewer", "refund", "email")
    assert [c.capability_id for c in t.tool_calls][1:] == ["payment.refund", "email.send"]
    assert t.tool_calls[0].capability_id in {"crm.get_customer", "crm.find_by_phone"}
    assert [c.step_id for c in t.tool_calls] == ["crm", "refund", "email"]
    assert [c.side_effect_class for c in t.tool_calls] == ["READ", "WRITE", "WRITE"]
    assert {c.outcome for c in t.tool_calls} == {"SUCCESS"}
    _check_decisions_match_calls(t)

    refund, email = t.side_effects
    assert (refund.capability_id, refund.step_id, refund.status) == (
        "payment.refund",
        "refund",
        "CONFIRMED",
    )
    suffix = result.outcome["ticket_id"].removeprefix("T-1001-")
    assert refund.arguments == {"order_id": f"O-1001-{suffix}", "amount": 80, "currency": "EUR"}
    assert refund.action_hash == action_hash("payment.refund", refund.arguments)
    assert (email.capability_id, email.step_id, email.status) == (
        "email.send",
        "email",
        "CONFIRMED",
    )
    # the trajectory shows the sanitized view (rule 17): the address as its pseudonym
    assert email.arguments["to"] == redaction_policy(REDACT_V1).sanitize("ada@example.com")  # type: ignore[index,call-overload]

    # both writes decided at the reviewer, on their action (input hash = action hash)
    assert [(p.step_id, p.policy_id, p.decision) for p in t.policy_decisions] == [
        ("reviewer", "outbound-actions", "REQUIRE_APPROVAL"),
        ("reviewer", "outbound-actions", "ALLOW"),
    ]
    assert [p.input_hash for p in t.policy_decisions] == [refund.action_hash, email.action_hash]

    writer = t.model_decisions[-1]
    assert writer.step_id == "reviewer" and writer.tool_names == () and writer.content
    # the CRM's name for the customer is redacted wherever it appears (redact-v2)
    ada = redaction_policy(REDACT_V2, (), ["Ada"]).sanitize("Ada")
    assert t.final_answer == writer.content and f"Hello {ada}" in t.final_answer
    sanitize = redaction_policy(REDACT_V1).sanitize
    assert t.outcome == sanitize(result.outcome) and t.outcome["resolution"] == "replied"  # type: ignore[index,call-overload]
    assert t.completed


async def test_refund_timeout_side_effect_ends_unknown(rec) -> None:
    result, t = await _run(rec, "refund-timeout", seed=7)
    assert t.steps == ("planner", "search", "crm", "reviewer", "refund")
    (effect,) = t.side_effects  # one fact for PLANNED → EXECUTING → UNKNOWN
    assert (effect.capability_id, effect.status) == ("payment.refund", "UNKNOWN")
    assert effect.arguments["amount"] == 30  # type: ignore[index,call-overload]
    assert effect.arguments["order_id"].startswith("O-3003-")  # type: ignore[index,call-overload,union-attr]
    assert [(c.capability_id, c.outcome) for c in t.tool_calls][1:] == [
        ("payment.refund", "UNKNOWN")
    ]
    assert [p.decision for p in t.policy_decisions] == ["ALLOW"]
    assert t.final_answer is None  # no email, so the writer never ran
    assert t.completed and t.outcome["resolution"] == "refund_outcome_unknown_escalated"  # type: ignore[index,call-overload]
    assert t.outcome == result.outcome


async def test_wrong_customer_v17_against_the_v18_fix(rec) -> None:
    _, bob = await _emailing_bob(rec)
    carol_result, carol = await _run(rec, "wrong-customer", prompt_version="v18", seed=0)
    assert carol_result.outcome["emailed"] == "carol@example.com"

    for t in (bob, carol):
        assert t.steps == ("planner", "search", "crm", "reviewer", "email")
        _check_decisions_match_calls(t)
    assert [c.capability_id for c in bob.tool_calls] == ["crm.find_by_phone", "email.send"]
    assert [c.capability_id for c in carol.tool_calls] == ["crm.get_customer", "email.send"]
    (bob_email,) = bob.side_effects
    assert bob_email.arguments["to"] == redaction_policy(REDACT_V1).sanitize("bob@example.com")  # type: ignore[index,call-overload]
    assert bob_email.status == "CONFIRMED"

    comparison = compare_trajectories(bob, carol)
    # the model chose the phone lookup in the planner step: that is where the runs part, the
    # CRM call at "crm" only carries the decision out
    assert comparison.first_divergent_step == "planner"
    kinds = [d.type for d in comparison.diffs]
    assert kinds == [
        DiffType.MODEL_DECISION_CHANGED,
        DiffType.TOOL_CHANGED,
        DiffType.ANSWER_CHANGED,
        DiffType.SIDE_EFFECT_CHANGED,
        DiffType.ARGUMENT_CHANGED,
        DiffType.OUTCOME_CHANGED,
    ]
    by_type = {d.type: d for d in comparison.diffs}
    decision = by_type[DiffType.MODEL_DECISION_CHANGED]
    assert decision.source_step == "planner"
    assert decision.explanation == "model at planner: crm.find_by_phone became crm.get_customer"
    lookup = by_type[DiffType.TOOL_CHANGED]
    assert (lookup.source_step, lookup.replay_step) == ("crm", "crm")
    assert lookup.explanation == (
        f"crm.find_by_phone(phone={redaction_policy(REDACT_V1).sanitize('+1-555-0199')}) "
        "became crm.get_customer(customer_id=C-2002)"
    )
    email = by_type[DiffType.SIDE_EFFECT_CHANGED]
    assert email.critical and (email.source_step, email.replay_step) == ("email", "email")
    assert email.explanation == (
        f"email.send(to={redaction_policy(REDACT_V1).sanitize('bob@example.com')}) became "
        f"email.send(to={redaction_policy(REDACT_V1).sanitize('carol@example.com')}); "
        "body also changed"
    )
    bob_token = redaction_policy(REDACT_V1).sanitize("bob@example.com")
    carol_token = redaction_policy(REDACT_V1).sanitize("carol@example.com")
    assert bob_token in by_type[DiffType.ARGUMENT_CHANGED].explanation
    names = redaction_policy(REDACT_V2, (), ["Bob", "Carol"]).sanitize
    assert f"“{names('Bob')}” became “{names('Carol')}”" in (
        by_type[DiffType.ANSWER_CHANGED].explanation
    )
    assert f"emailed {bob_token} became {carol_token}" in (
        by_type[DiffType.OUTCOME_CHANGED].explanation
    )
    assert comparison.critical
    assert not comparison.same_outcome and not comparison.same_tool_sequence
    assert not comparison.same_side_effects and 0.5 < comparison.answer_similarity < 1.0
    assert not reproduces(comparison)


async def test_a_trajectory_compared_with_itself_reproduces(rec) -> None:
    result, t = await _emailing_bob(rec)
    again = await load_trajectory(rec.ledger, result.run_id)
    assert again == t
    comparison = compare_trajectories(t, again)
    assert comparison.diffs == () and comparison.first_divergent_step is None
    assert reproduces(comparison)


async def test_a_failed_run_has_its_error_as_outcome(rec) -> None:
    suffix = uuid.uuid4().hex[:6]
    ticket = {
        **SCENARIOS["happy"],
        "ticket_id": f"T-1001-{suffix}",
        "order_id": f"O-1001-{suffix}",
    }
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    with pytest.raises(ApprovalDeniedError):
        await record_run(
            support_desk_spec(rec.world, deny_approvals=True),
            rec.ledger,
            rec.artifacts,
            run_id=run_id,
            agent_input=ticket,
            seed=3,
        )
    t = await load_trajectory(rec.ledger, run_id)
    assert t.steps[-1] == "refund" and not t.completed
    assert t.outcome["error"] == "ApprovalDeniedError"  # type: ignore[index,call-overload]
    assert set(t.outcome) == {"error", "message"}  # type: ignore[arg-type]
    assert t.side_effects == ()  # refused before anything was planned
    assert [p.decision for p in t.policy_decisions] == ["REQUIRE_APPROVAL", "ALLOW"]


async def test_a_replay_run_has_one_blocked_fact_per_write_blocked_event(rec) -> None:
    """A replay-shaped run written by hand (WRITE_BLOCKED, no SIDE_EFFECT), left unfinished."""
    source_result, source = await _emailing_bob(rec)
    (sent,) = source.side_effects
    run_id = f"replay-{uuid.uuid4().hex[:12]}"
    await rec.ledger.create_run(
        RunRecord(
            run_id=run_id, graph_id="support-desk", graph_version="1", created_at=datetime.now(UTC)
        )
    )
    recorder = RunRecorder(rec.ledger, rec.artifacts, run_id)
    recorder.step_id = "email"
    await recorder.record(E.STEP_STARTED, payload={"step": "email"})
    for _ in range(2):  # the agent tried the same write twice: both attempts count
        await recorder.record(
            E.WRITE_BLOCKED,
            payload={
                "capability_id": "email.send",
                "action_hash": sent.action_hash,
                "arguments": sent.arguments,
                "answered_with": "recorded",
                "source_side_effect_id": "se-x",
            },
        )
    t = await load_trajectory(rec.ledger, run_id)
    assert t.steps == ("email",)
    assert [(e.step_id, e.capability_id, e.status) for e in t.side_effects] == [
        ("email", "email.send", BLOCKED)
    ] * 2
    assert t.side_effects[0].arguments == sent.arguments
    assert t.side_effects[0].action_hash == sent.action_hash
    assert t.outcome is None and not t.completed and t.final_answer is None

    comparison = compare_trajectories(source, t)
    assert not comparison.same_side_effects  # one write executed, two attempted
    assert [d.type for d in comparison.diffs if d.critical] == [DiffType.SIDE_EFFECT_ADDED]
    assert not comparison.same_outcome and not reproduces(comparison)
    assert redaction_policy(REDACT_V1).sanitize(source_result.outcome) == source.outcome
