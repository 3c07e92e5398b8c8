"""Regression cases: structural assertions on hand-built trajectories, and the wrong-customer
incident's case on real recorded runs (v17 fails it, v18 passes) on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.errors import ConflictError, InvalidInputError
from models.redaction import REDACT_V1, RedactionPolicy
from models.regression import (
    ArgumentConstraint,
    ExpectedOutcome,
    ForbiddenSideEffect,
    ForbiddenToolSequence,
    RegressionCase,
    RegressionCaseStatus,
    RequiredToolSequence,
    evaluate_case,
    retire_case,
)
from models.trajectory import SideEffectFact, ToolCallFact, Trajectory
from runtime.trajectory import load_trajectory
from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.support_desk_world import SqlWorldStore
from tests.runtime.conftest import Recording

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
CAROL = "carol@example.com"
SANITIZED = RedactionPolicy(REDACT_V1).sanitize
NOT_CAROL = ForbiddenSideEffect(
    capability_id="email.send",
    where=(ArgumentConstraint(field="to", op="not_equal", value=CAROL),),
)
RIGHT_CUSTOMER = ExpectedOutcome(contains={"customer_id": "C-2002"})


def case(*assertions: Any, **changes: Any) -> RegressionCase:
    fields = {
        "case_id": "case-1",
        "incident_id": "inc-1",
        "source_run_id": "run-1",
        "created_at": T0,
        "assertions": assertions,
        **changes,
    }
    return RegressionCase.model_validate(fields)


def trajectory(
    calls: list[str] | None = None,
    emails: list[Any] | None = None,
    outcome: Any = None,
    completed: bool = True,
    status: str = "CONFIRMED",
) -> Trajectory:
    return Trajectory(
        run_id="run-x",
        tool_calls=tuple(
            ToolCallFact(
                step_id="s",
                capability_id=name,
                request_hash="h",
                outcome="SUCCESS",
                side_effect_class="READ",
            )
            for name in calls or []
        ),
        side_effects=tuple(
            SideEffectFact(
                step_id="email",
                capability_id="email.send",
                action_hash="a",
                arguments=args,
                status=status,
            )
            for args in emails or []
        ),
        outcome=outcome,
        completed=completed,
    )


# hand-built -----------------------------------------------------------------------------------


def test_an_email_to_anyone_but_carol_is_forbidden() -> None:
    result = evaluate_case(case(NOT_CAROL), trajectory(emails=[{"to": "bob@example.com"}]))
    assert not result.passed
    (failure,) = result.failures
    assert failure.index == 0 and failure.kind == "forbidden_side_effect"
    assert failure.assertion == "no email.send where to not_equal 'carol@example.com'"
    assert "to='bob@example.com'" in failure.reason and "\n" not in failure.reason
    assert evaluate_case(case(NOT_CAROL), trajectory(emails=[{"to": CAROL}])).passed


def test_blocked_replay_writes_and_unrecorded_arguments_count_as_attempts() -> None:
    blocked = trajectory(emails=[{"to": "bob@example.com"}], status="BLOCKED")
    assert not evaluate_case(case(NOT_CAROL), blocked).passed
    unrecorded = evaluate_case(case(NOT_CAROL), trajectory(emails=[None]))
    assert not unrecorded.passed and "to absent" in unrecorded.failures[0].reason
    any_email = case(ForbiddenSideEffect(capability_id="email.send"))
    assert not evaluate_case(any_email, trajectory(emails=[{"to": CAROL}])).passed
    assert evaluate_case(any_email, trajectory()).passed


@pytest.mark.parametrize(
    ("constraint", "arguments", "holds"),
    [
        ({"field": "to", "op": "equal", "value": CAROL}, {"to": CAROL}, True),
        ({"field": "to", "op": "equal", "value": CAROL}, {}, False),
        ({"field": "to", "op": "in", "value": [CAROL, "x"]}, {"to": "x"}, True),
        ({"field": "to", "op": "not_in", "value": [CAROL]}, {"to": "x"}, True),
        ({"field": "to", "op": "not_in", "value": [CAROL]}, {}, True),
        ({"field": "a.b", "op": "equal", "value": 1}, {"a": {"b": 1}}, True),
        ({"field": "a.b", "op": "equal", "value": 1}, {"a": {"b": True}}, False),
        ({"field": "a.b", "op": "not_equal", "value": 1}, {"a": 7}, True),
    ],
)
def test_argument_constraints(constraint: dict, arguments: Any, holds: bool) -> None:
    assert ArgumentConstraint.model_validate(constraint).holds(arguments) is holds


def test_membership_needs_a_list() -> None:
    with pytest.raises(ValidationError, match="needs a list"):
        ArgumentConstraint(field="to", op="in", value=CAROL)
    with pytest.raises(ValidationError):
        ArgumentConstraint(field="to", op="like", value=CAROL)


def test_tool_sequences_are_ordered_subsequences() -> None:
    calls = ["kb.search", "crm.get_customer", "payment.refund", "email.send"]
    required = case(RequiredToolSequence(capability_ids=("crm.get_customer", "email.send")))
    assert evaluate_case(required, trajectory(calls)).passed
    missing = evaluate_case(required, trajectory(["email.send", "crm.get_customer"]))
    assert missing.failures[0].reason.startswith("missing email.send after the first 1")
    forbidden = case(ForbiddenToolSequence(capability_ids=("crm.find_by_phone", "email.send")))
    assert evaluate_case(forbidden, trajectory(calls)).passed
    hit = evaluate_case(forbidden, trajectory(["crm.find_by_phone", "kb.search", "email.send"]))
    assert hit.failures[0].kind == "forbidden_tool_sequence"
    assert "crm.find_by_phone → kb.search → email.send" in hit.failures[0].reason


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        ({"customer_id": "C-2002", "emailed": CAROL}, None),
        ({"customer_id": "C-2001"}, "outcome.customer_id is 'C-2001', expected 'C-2002'"),
        ({"emailed": CAROL}, "outcome.customer_id is missing, expected 'C-2002'"),
        (None, "outcome is None, expected an object"),
    ],
)
def test_expected_outcome_is_a_json_subset(outcome: Any, reason: str | None) -> None:
    result = evaluate_case(case(RIGHT_CUSTOMER), trajectory(outcome=outcome))
    assert [f.reason for f in result.failures] == ([reason] if reason else [])


def test_subset_rules_for_arrays_and_booleans() -> None:
    nested = case(ExpectedOutcome(contains={"a": [1, {"b": True}]}))
    assert evaluate_case(nested, trajectory(outcome={"a": [1, {"b": True, "c": 0}]})).passed
    assert not evaluate_case(nested, trajectory(outcome={"a": [1, {"b": 1}]})).passed
    assert not evaluate_case(nested, trajectory(outcome={"a": [1]})).passed
    flag = case(ExpectedOutcome(contains={"flags": [True]}))
    assert not evaluate_case(flag, trajectory(outcome={"flags": [1]})).passed
    deep = ArgumentConstraint(field="x", op="in", value=[{"k": [True]}])
    assert deep.holds({"x": {"k": [True]}}) and not deep.holds({"x": {"k": [1]}})


def test_a_partial_run_cannot_pass_unless_the_case_allows_it() -> None:
    partial = trajectory(emails=[{"to": CAROL}], completed=False, outcome={"error": "Budget"})
    result = evaluate_case(case(NOT_CAROL), partial)
    assert [f.kind for f in result.failures] == ["completed"]
    assert evaluate_case(case(NOT_CAROL, require_completed=False), partial).passed


def test_case_record_status_retirement_and_json() -> None:
    active = case(NOT_CAROL, RIGHT_CUSTOMER)
    assert active.status is RegressionCaseStatus.ACTIVE
    again = RegressionCase.model_validate_json(active.model_dump_json())
    assert again == active and again.record_hash() == active.record_hash()
    retired = retire_case(active, "superseded by case-2", T0)
    assert retired.status is RegressionCaseStatus.RETIRED and retired.retired_at == T0
    assert retired.assertions == active.assertions
    with pytest.raises(InvalidInputError, match="needs a reason"):
        retire_case(active, "  ", T0)
    with pytest.raises(ConflictError, match="already retired: superseded by case-2"):
        retire_case(retired, "again", T0)
    with pytest.raises(ValidationError, match="retired_reason"):
        case(NOT_CAROL, status="RETIRED")
    with pytest.raises(ValidationError):
        case()  # a case asserts something
    with pytest.raises(ValidationError):
        case(NOT_CAROL, surprise=1)


# recorded runs --------------------------------------------------------------------------------


@pytest.fixture
async def rec(database: Database, tmp_path: Path) -> Recording:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    world = SimulatedWorld(SqlWorldStore.beside(database.engine.url))
    await world.ensure()
    return Recording(
        database, SqlLedger(database, artifacts), artifacts, SqlEvidenceReader(database), world
    )


async def test_wrong_customer_case_fails_on_v17_and_holds_on_v18(rec: Recording) -> None:
    # seed 0: under v17 the scripted model looks the customer up by phone (bob comes first)
    v17 = await run_scenario(rec.world, rec.ledger, rec.artifacts, "wrong-customer", seed=0)
    assert v17.outcome["emailed"] == "bob@example.com"
    v18 = await run_scenario(
        rec.world, rec.ledger, rec.artifacts, "wrong-customer", prompt_version="v18", seed=0
    )
    assert v18.outcome["emailed"] == CAROL
    # recorded evidence is sanitized (redact-v1): a case derived from it names the pseudonyms
    carol, bob = SANITIZED(CAROL), SANITIZED("bob@example.com")
    not_carol = ForbiddenSideEffect(
        capability_id="email.send",
        where=(ArgumentConstraint(field="to", op="not_equal", value=carol),),
    )
    incident_case = case(not_carol, RIGHT_CUSTOMER, source_run_id=v17.run_id)

    failed = evaluate_case(incident_case, await load_trajectory(rec.ledger, v17.run_id))
    assert not failed.passed and failed.run_id == v17.run_id
    assert [(f.index, f.kind) for f in failed.failures] == [
        (0, "forbidden_side_effect"),
        (1, "expected_outcome"),
    ]
    assert failed.failures[0].assertion == f"no email.send where to not_equal '{carol}'"
    assert f"to='{bob}'" in failed.failures[0].reason
    assert failed.failures[1].reason == "outcome.customer_id is 'C-2001', expected 'C-2002'"

    held = evaluate_case(incident_case, await load_trajectory(rec.ledger, v18.run_id))
    assert held.passed and held.failures == ()

    by_id = case(
        RequiredToolSequence(capability_ids=("crm.get_customer", "email.send")),
        ForbiddenToolSequence(capability_ids=("crm.find_by_phone", "email.send")),
    )
    assert not evaluate_case(by_id, await load_trajectory(rec.ledger, v17.run_id)).passed
    assert evaluate_case(by_id, await load_trajectory(rec.ledger, v18.run_id)).passed
