"""The expectation language (models.expectations): parsing, binding and checking (pure)."""

from __future__ import annotations

import pytest

from models.errors import InvalidInputError
from models.expectations import bind, check_expectation, parse_expectation
from models.regression import HumanExpectation, RegressionCase, evaluate_case
from models.trajectory import SideEffectFact, ToolCallFact, Trajectory


def trajectory(*, to: str = "bob@example.com", calls: tuple[str, ...] = ()) -> Trajectory:
    return Trajectory(
        run_id="r",
        input={"ticket_id": "T-1", "customer_id": "C-2", "customer": {"email": "carol@x.org"}},
        tool_calls=tuple(
            ToolCallFact(
                step_id=f"s{i}",
                capability_id=c,
                request_hash="h",
                outcome="OK",
                side_effect_class="READ",
            )
            for i, c in enumerate(calls)
        ),
        side_effects=(
            SideEffectFact(
                step_id="email",
                capability_id="email.send",
                action_hash="a",
                arguments={"to": to},
                status="CONFIRMED",
            ),
        ),
        outcome={"refund_status": "RECONCILED", "customer_id": "C-2", "amount": 80},
    )


def check(text: str, t: Trajectory, source: Trajectory | None = None) -> str | None:
    e = parse_expectation(text)
    return check_expectation(e, t, bind(e, source or t))


def test_no_side_effect_with_a_reference_into_the_input() -> None:
    text = "no side_effect email.send where to != ticket.customer.email"
    problem = check(text, trajectory())
    assert problem and "email.send in step email" in problem and "bob@example.com" in problem
    assert check(text, trajectory(to="carol@x.org")) is None
    # input.PATH is the same reference written out
    assert (
        check(
            "no side_effect email.send where to != input.customer.email",
            trajectory(to="carol@x.org"),
        )
        is None
    )
    assert check("no side_effect email.send", trajectory()) is not None
    assert check("no side_effect payment.refund", trajectory()) is None


def test_conditions_combine_and_membership() -> None:
    t = trajectory()
    assert check('no side_effect email.send where to in ["bob@example.com", "eve@x"]', t)
    assert check('no side_effect email.send where to not in ["bob@example.com"]', t) is None
    assert check('no side_effect email.send where to == "bob@example.com" and cc == "x"', t) is None
    # an absent argument satisfies != (never waved through)
    assert check('no side_effect email.send where cc != "x"', t)


def test_tool_order() -> None:
    before = "tool crm.get_customer called before email.send"
    assert check(before, trajectory(calls=("crm.get_customer", "email.send"))) is None
    problem = check(before, trajectory(calls=("email.send", "crm.get_customer")))
    assert problem and "before any crm.get_customer" in problem
    assert check(before, trajectory(calls=("crm.get_customer",))) is None
    assert (
        check("tool crm.get_customer called", trajectory()) == "crm.get_customer was never called"
    )
    assert check("no tool email.send", trajectory(calls=("email.send",))) == "email.send was called"


def test_outcome_comparisons() -> None:
    t = trajectory()
    assert check('outcome.refund_status == "RECONCILED"', t) is None
    assert check("outcome.amount == 80", t) is None
    assert check("outcome.amount == 80.5", t) == "outcome.amount is 80, expected == 80.5"
    assert check("outcome.customer_id == ticket.customer_id", t) is None
    assert check("outcome.missing == null", t) == "outcome.missing is absent, expected == null"
    assert check("outcome.missing != true", t) is None


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "must not be empty"),
        ("side_effect email.send", "'no', 'tool' or 'outcome'"),
        ("no side_effect", "a capability"),
        ("no side_effect email.send where to", "==, !=, in or not in"),
        ("no side_effect email.send where to ~= 'x'", "cannot read"),
        ("tool a called after b", "the end"),
        ("outcome.x in 3", "needs a list"),
        ("outcome.x == [1, input.y]", "a literal inside a list"),
    ],
)
def test_bad_expectations_say_where(text: str, needle: str) -> None:
    with pytest.raises(InvalidInputError) as exc:
        parse_expectation(text)
    assert needle in str(exc.value)


def test_a_case_with_a_human_expectation_binds_the_incident_input() -> None:
    source = trajectory()
    text = "no side_effect email.send where to != ticket.customer.email"
    bound = bind(parse_expectation(text), source)
    assert bound == {"ticket.customer.email": "carol@x.org"}
    case = RegressionCase(
        case_id="c",
        incident_id="i",
        source_run_id="r",
        created_at="2026-01-01T00:00:00Z",
        assertions=(HumanExpectation(text=text, bound=bound),),
    )
    # a candidate whose input was not recorded is still judged against the incident's input
    candidate = trajectory(to="carol@x.org").model_copy(update={"input": None})
    assert evaluate_case(case, candidate).passed
    failed = evaluate_case(case, source)
    assert not failed.passed and failed.failures[0].assertion == text
