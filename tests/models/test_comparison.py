"""Behavioural comparison of trajectories and the reproduction statistics (pure, hand-built)."""

from __future__ import annotations

from math import sqrt
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models import DiffType
from models.canonical import canonical_hash
from models.comparison import answer_similarity, compare_trajectories, reproduces
from models.errors import InvalidInputError
from models.statistics import reproduction_summary, wilson_interval
from models.trajectory import (
    ModelDecision,
    PolicyFact,
    SideEffectFact,
    ToolCallFact,
    Trajectory,
)

# builders -----------------------------------------------------------------------------------


def decision(step: str, *calls: tuple[str, dict[str, Any]], content: str | None = None):
    return ModelDecision(
        step_id=step,
        tool_names=tuple(name for name, _ in calls),
        argument_hashes=tuple(canonical_hash(args) for _, args in calls),
        content=content,
    )


def tool(step: str, capability: str, arguments: dict[str, Any], write: bool = False):
    return ToolCallFact(
        step_id=step,
        capability_id=capability,
        request_hash=canonical_hash({"name": capability, "arguments": arguments}),
        arguments=arguments,
        outcome="SUCCESS",
        side_effect_class="WRITE" if write else "READ",
    )


def effect(step: str, capability: str, arguments: dict[str, Any], status: str = "CONFIRMED"):
    return SideEffectFact(
        step_id=step,
        capability_id=capability,
        action_hash=canonical_hash({"capability": capability, "arguments": arguments}),
        arguments=arguments,
        status=status,
    )


def policy(step: str, capability: str, arguments: dict[str, Any], verdict: str = "ALLOW"):
    return PolicyFact(
        step_id=step,
        policy_id="outbound-actions",
        input_hash=canonical_hash({"capability": capability, "arguments": arguments}),
        decision=verdict,
    )


STEPS = ("planner", "search", "crm", "reviewer", "email")
BODY = "Hello {name},\n\nInvoices are sent by email to the customer's address on file in the CRM."


def email_args(who: str) -> dict[str, Any]:
    return {
        "to": f"{who.lower()}@example.com",
        "subject": "About your request",
        "body": BODY.format(name=who),
    }


def support_run(
    who: str = "Bob",
    *,
    lookup: tuple[str, dict[str, Any]] = ("crm.find_by_phone", {"phone": "+1-555-0199"}),
    run_id: str = "run-source",
    status: str = "CONFIRMED",
) -> Trajectory:
    """The wrong-customer ticket: plan, look the customer up, email them."""
    answer = f'{{"body": "{BODY.format(name=who)}", "subject": "About your request"}}'
    return Trajectory(
        run_id=run_id,
        steps=STEPS,
        model_decisions=(
            decision(
                "planner",
                ("kb.search", {"query": "invoice"}),
                lookup,
                ("email.send", {}),
            ),
            decision("reviewer", content=answer),
        ),
        tool_calls=(
            tool("crm", *lookup),
            tool("email", "email.send", email_args(who), write=True),
        ),
        side_effects=(effect("email", "email.send", email_args(who), status),),
        policy_decisions=(policy("reviewer", "email.send", email_args(who)),),
        outcome={
            "customer_id": {"Bob": "C-2001", "Carol": "C-2002"}.get(who, "C-0"),
            "emailed": f"{who.lower()}@example.com",
            "resolution": "replied",
        },
        final_answer=answer,
        completed=True,
    )


SOURCE = support_run()


def only(comparison, type_: DiffType):
    found = [d for d in comparison.diffs if d.type is type_]
    assert len(found) == 1, comparison.diffs
    return found[0]


def types(comparison) -> list[DiffType]:
    return [d.type for d in comparison.diffs]


# identical ----------------------------------------------------------------------------------


def test_identical_trajectories_have_no_diffs_and_reproduce() -> None:
    replay = SOURCE.model_copy(update={"run_id": "run-replay"})
    comparison = compare_trajectories(SOURCE, replay)
    assert comparison.diffs == ()
    assert comparison.same_outcome and comparison.same_tool_sequence
    assert comparison.same_side_effects
    assert comparison.answer_similarity == 1.0
    assert comparison.first_divergent_step is None
    assert not comparison.critical
    assert reproduces(comparison)


def test_blocked_writes_with_the_recorded_action_hash_are_the_same_side_effects() -> None:
    replay = support_run(run_id="run-replay", status="BLOCKED")
    comparison = compare_trajectories(SOURCE, replay)
    assert comparison.same_side_effects and comparison.diffs == ()
    assert reproduces(comparison)


def test_empty_trajectories_compare_equal() -> None:
    comparison = compare_trajectories(Trajectory(run_id="a"), Trajectory(run_id="b"))
    assert comparison.diffs == () and reproduces(comparison)


# the wrong-customer fix, end to end ---------------------------------------------------------


def test_the_v18_fix_diverges_at_the_planner_with_a_critical_side_effect_change() -> None:
    fixed = support_run("Carol", lookup=("crm.get_customer", {"customer_id": "C-2002"}))
    comparison = compare_trajectories(SOURCE, fixed)
    assert comparison.first_divergent_step == "planner"
    assert types(comparison) == [
        DiffType.MODEL_DECISION_CHANGED,  # planner
        DiffType.TOOL_CHANGED,  # crm
        DiffType.ANSWER_CHANGED,  # reviewer (the writer's text)
        DiffType.SIDE_EFFECT_CHANGED,  # email (PLANNED is recorded before the call)
        DiffType.ARGUMENT_CHANGED,  # email
        DiffType.OUTCOME_CHANGED,  # end of run
    ]
    assert comparison.critical
    assert not comparison.same_outcome and not comparison.same_tool_sequence
    assert not comparison.same_side_effects
    assert not reproduces(comparison)
    changed = only(comparison, DiffType.SIDE_EFFECT_CHANGED)
    assert changed.critical and (changed.source_step, changed.replay_step) == ("email", "email")
    assert changed.explanation == (
        "email.send(to=bob@example.com) became email.send(to=carol@example.com); body also changed"
    )
    tool_changed = only(comparison, DiffType.TOOL_CHANGED)
    assert tool_changed.explanation == (
        "crm.find_by_phone(phone=+1-555-0199) became crm.get_customer(customer_id=C-2002)"
    )
    assert not tool_changed.critical


# model decisions ----------------------------------------------------------------------------


def test_only_the_first_changed_model_decision_is_reported() -> None:
    replay = SOURCE.model_copy(
        update={
            "model_decisions": (
                decision("planner", ("kb.search", {"query": "invoice"}), ("email.send", {})),
                decision("reviewer", ("kb.search", {"query": "x"})),
            )
        }
    )
    diff = only(compare_trajectories(SOURCE, replay), DiffType.MODEL_DECISION_CHANGED)
    assert (diff.source_step, diff.replay_step) == ("planner", "planner")
    assert diff.explanation == "model at planner: no longer asked for crm.find_by_phone"
    assert not diff.critical


def test_model_decision_with_other_tools_other_arguments_extra_and_missing() -> None:
    other_tool = SOURCE.model_copy(
        update={
            "model_decisions": (
                decision("planner", ("kb.search", {"query": "invoice"}), ("crm.get", {"id": 1})),
            )
        }
    )
    diff = only(compare_trajectories(SOURCE, other_tool), DiffType.MODEL_DECISION_CHANGED)
    assert diff.explanation == "model at planner: crm.find_by_phone, email.send became crm.get"

    other_args = SOURCE.model_copy(
        update={
            "model_decisions": (
                decision(
                    "planner",
                    ("kb.search", {"query": "refund"}),
                    ("crm.find_by_phone", {"phone": "+1-555-0199"}),
                    ("email.send", {}),
                ),
                SOURCE.model_decisions[1],
            )
        }
    )
    diff = only(compare_trajectories(SOURCE, other_args), DiffType.MODEL_DECISION_CHANGED)
    assert diff.explanation == "model at planner asked for kb.search with other arguments"

    extra = SOURCE.model_copy(
        update={"model_decisions": (*SOURCE.model_decisions, decision("email", ("x.y", {})))}
    )
    diff = only(compare_trajectories(SOURCE, extra), DiffType.MODEL_DECISION_CHANGED)
    assert (diff.source_step, diff.replay_step) == (None, "email")
    assert "extra model call at email (x.y)" in diff.explanation

    missing = SOURCE.model_copy(update={"model_decisions": SOURCE.model_decisions[:1]})
    diff = only(compare_trajectories(SOURCE, missing), DiffType.MODEL_DECISION_CHANGED)
    assert (diff.source_step, diff.replay_step) == ("reviewer", None)

    reordered = SOURCE.model_copy(
        update={
            "model_decisions": (
                decision(
                    "planner",
                    ("crm.find_by_phone", {"phone": "+1-555-0199"}),
                    ("kb.search", {"query": "invoice"}),
                    ("email.send", {}),
                ),
                SOURCE.model_decisions[1],
            )
        }
    )
    diff = only(compare_trajectories(SOURCE, reordered), DiffType.MODEL_DECISION_CHANGED)
    assert "another order" in diff.explanation


# tool calls ---------------------------------------------------------------------------------


def test_tool_changed_at_a_position_extra_and_missing_calls() -> None:
    lookup = tool("crm", "crm.get_customer", {"customer_id": "C-2002"})
    changed = SOURCE.model_copy(update={"tool_calls": (lookup, SOURCE.tool_calls[1])})
    comparison = compare_trajectories(SOURCE, changed)
    diff = only(comparison, DiffType.TOOL_CHANGED)
    assert (diff.source_step, diff.replay_step) == ("crm", "crm")
    assert not comparison.same_tool_sequence
    assert DiffType.ARGUMENT_CHANGED not in types(comparison)

    missing = SOURCE.model_copy(update={"tool_calls": SOURCE.tool_calls[:1]})
    diff = only(compare_trajectories(SOURCE, missing), DiffType.TOOL_CHANGED)
    assert diff.explanation.startswith("the replay did not call email.send(")
    assert "to=bob@example.com" in diff.explanation and "Invoices" not in diff.explanation
    assert (diff.source_step, diff.replay_step) == ("email", None)

    extra_call = tool("search", "kb.lookup", {"q": "invoice"})
    extra = SOURCE.model_copy(update={"tool_calls": (extra_call, *SOURCE.tool_calls)})
    comparison = compare_trajectories(SOURCE, extra)
    # aligned by capability: the extra call does not make the later calls look changed
    diff = only(comparison, DiffType.TOOL_CHANGED)
    assert diff.explanation == "the replay also called kb.lookup(q=invoice)"
    assert (diff.source_step, diff.replay_step) == (None, "search")
    assert comparison.first_divergent_step == "search"
    assert DiffType.ARGUMENT_CHANGED not in types(comparison)

    no_arguments = SOURCE.model_copy(
        update={"tool_calls": (*SOURCE.tool_calls, tool("email", "audit.log", {}))}
    )
    diff = only(compare_trajectories(SOURCE, no_arguments), DiffType.TOOL_CHANGED)
    assert diff.explanation == "the replay also called audit.log()"


def test_argument_changed_names_the_changed_values_without_dumping_payloads() -> None:
    carol = tool("email", "email.send", email_args("Carol"), write=True)
    replay = SOURCE.model_copy(update={"tool_calls": (SOURCE.tool_calls[0], carol)})
    comparison = compare_trajectories(SOURCE, replay)
    diff = only(comparison, DiffType.ARGUMENT_CHANGED)
    assert diff.explanation == (
        "email.send(to=bob@example.com) became email.send(to=carol@example.com); body also changed"
    )
    assert not diff.critical and comparison.first_divergent_step == "email"

    huge = {"blob": "x" * 10_000, "n": list(range(1000))}
    a = Trajectory(run_id="a", tool_calls=(tool("s", "t.u", huge),))
    b = Trajectory(run_id="b", tool_calls=(tool("s", "t.u", {**huge, "blob": "y" * 10_000}),))
    diff = only(compare_trajectories(a, b), DiffType.ARGUMENT_CHANGED)
    assert diff.explanation == "t.u arguments changed: blob"

    # arguments not available (redacted away): the hashes are named, shortened
    c = Trajectory(
        run_id="c",
        tool_calls=(a.tool_calls[0].model_copy(update={"arguments": None}),),
    )
    d = Trajectory(
        run_id="d",
        tool_calls=(b.tool_calls[0].model_copy(update={"arguments": None}),),
    )
    diff = only(compare_trajectories(c, d), DiffType.ARGUMENT_CHANGED)
    assert diff.explanation.startswith("t.u sha256:") and len(diff.explanation) < 60


def test_explanations_are_one_short_line() -> None:
    long_text = "line one\nline two " + "z" * 500
    a = support_run()
    b = Trajectory(
        run_id="b",
        steps=STEPS,
        model_decisions=(decision("planner", ("t", {"v": long_text}), content=long_text),),
        tool_calls=(tool("crm", "crm.find_by_phone", {"phone": long_text}),),
        side_effects=(effect("email", "email.send", {"to": long_text}),),
        policy_decisions=(policy("reviewer", "email.send", {"to": long_text}, "DENY"),),
        outcome={"emailed": long_text},
        final_answer=long_text,
    )
    for diff in compare_trajectories(a, b).diffs:
        assert "\n" not in diff.explanation and len(diff.explanation) < 200, diff


# policy decisions ---------------------------------------------------------------------------


def test_policy_changed_on_the_same_input() -> None:
    denied = policy("reviewer", "email.send", email_args("Bob"), "DENY")
    replay = SOURCE.model_copy(update={"policy_decisions": (denied,)})
    diff = only(compare_trajectories(SOURCE, replay), DiffType.POLICY_CHANGED)
    assert diff.explanation == "outbound-actions at reviewer: ALLOW became DENY on the same input"
    assert (diff.source_step, diff.replay_step) == ("reviewer", "reviewer")
    assert not diff.critical


def test_policy_on_another_input_is_only_a_change_when_the_verdict_changes() -> None:
    carol = (policy("reviewer", "email.send", email_args("Carol")),)
    same_verdict = SOURCE.model_copy(update={"policy_decisions": carol})
    assert compare_trajectories(SOURCE, same_verdict).diffs == ()

    refund = {"order_id": "O-1", "amount": 80, "currency": "EUR"}
    source = SOURCE.model_copy(
        update={
            "policy_decisions": (
                policy("reviewer", "payment.refund", refund, "REQUIRE_APPROVAL"),
                *SOURCE.policy_decisions,
            )
        }
    )
    bigger = policy("reviewer", "payment.refund", {**refund, "amount": 600}, "DENY")
    replay = source.model_copy(update={"policy_decisions": (bigger, *SOURCE.policy_decisions)})
    diff = only(compare_trajectories(source, replay), DiffType.POLICY_CHANGED)
    assert diff.explanation == (
        "outbound-actions at reviewer: REQUIRE_APPROVAL became DENY on another input"
    )

    # the refund was not planned in the replay: its decision is missing, the email one is
    # paired with the email one (same verdict), not with the refund's
    dropped = source.model_copy(update={"policy_decisions": carol})
    diff = only(compare_trajectories(source, dropped), DiffType.POLICY_CHANGED)
    assert (diff.source_step, diff.replay_step) == ("reviewer", None)
    assert "REQUIRE_APPROVAL" in diff.explanation

    extra = SOURCE.model_copy(update={"policy_decisions": (*SOURCE.policy_decisions, bigger)})
    diff = only(compare_trajectories(SOURCE, extra), DiffType.POLICY_CHANGED)
    assert (diff.source_step, diff.replay_step) == (None, "reviewer")
    assert "extra outbound-actions decision: DENY" in diff.explanation


# side effects -------------------------------------------------------------------------------


def test_side_effect_changed_is_critical_and_named() -> None:
    replay = SOURCE.model_copy(
        update={"side_effects": (effect("email", "email.send", email_args("Carol"), "BLOCKED"),)}
    )
    comparison = compare_trajectories(SOURCE, replay)
    diff = only(comparison, DiffType.SIDE_EFFECT_CHANGED)
    assert diff.critical and comparison.critical
    assert "bob@example.com" in diff.explanation and "carol@example.com" in diff.explanation
    assert not comparison.same_side_effects and not reproduces(comparison)
    assert comparison.first_divergent_step == "email"


def test_side_effect_added_and_removed_are_critical() -> None:
    none = SOURCE.model_copy(update={"side_effects": ()})
    removed = only(compare_trajectories(SOURCE, none), DiffType.SIDE_EFFECT_REMOVED)
    assert removed.critical and (removed.source_step, removed.replay_step) == ("email", None)
    assert removed.explanation.startswith("email.send(")
    assert "CONFIRMED in the source" in removed.explanation

    refund = effect("refund", "payment.refund", {"order_id": "O-1", "amount": 30}, "BLOCKED")
    more = SOURCE.model_copy(update={"side_effects": (*SOURCE.side_effects, refund)})
    added = only(compare_trajectories(SOURCE, more), DiffType.SIDE_EFFECT_ADDED)
    assert added.critical and (added.source_step, added.replay_step) == (None, "refund")
    assert "payment.refund(amount=30, order_id=O-1)" in added.explanation

    # the same capability in another step is not a change of that write: removed + added
    moved = SOURCE.model_copy(
        update={"side_effects": (effect("reviewer", "email.send", email_args("Carol")),)}
    )
    comparison = compare_trajectories(SOURCE, moved)
    assert DiffType.SIDE_EFFECT_CHANGED not in types(comparison)
    assert {DiffType.SIDE_EFFECT_ADDED, DiffType.SIDE_EFFECT_REMOVED} <= set(types(comparison))
    assert all(d.critical for d in comparison.diffs if d.type.name.startswith("SIDE_EFFECT"))


def test_side_effects_are_compared_as_a_multiset() -> None:
    twice = SOURCE.model_copy(update={"side_effects": SOURCE.side_effects * 2})
    comparison = compare_trajectories(twice, SOURCE)
    assert not comparison.same_side_effects
    assert types(comparison) == [DiffType.SIDE_EFFECT_REMOVED]
    swapped_status = SOURCE.model_copy(
        update={"side_effects": (SOURCE.side_effects[0].model_copy(update={"status": "UNKNOWN"}),)}
    )
    assert compare_trajectories(SOURCE, swapped_status).same_side_effects


# outcome ------------------------------------------------------------------------------------


def test_outcome_changed_names_the_changed_fields() -> None:
    outcome = {**SOURCE.outcome, "customer_id": "C-2002", "emailed": "carol@example.com"}  # type: ignore[dict-item]
    replay = SOURCE.model_copy(update={"outcome": outcome})
    comparison = compare_trajectories(SOURCE, replay)
    diff = only(comparison, DiffType.OUTCOME_CHANGED)
    assert diff.explanation == (
        "outcome: customer_id C-2001 became C-2002; emailed bob@example.com became carol@example.com"
    )
    assert (diff.source_step, diff.replay_step) == ("email", "email")
    assert not diff.critical and not comparison.same_outcome
    assert comparison.first_divergent_step == "email"
    assert not reproduces(comparison)


def test_outcome_of_failed_and_partial_runs() -> None:
    failed = SOURCE.model_copy(
        update={
            "steps": STEPS[:3],
            "outcome": {"error": "PolicyDeniedError", "message": "no"},
            "completed": False,
        }
    )
    diff = only(compare_trajectories(SOURCE, failed), DiffType.OUTCOME_CHANGED)
    assert diff.explanation == "the source completed, the replay failed (PolicyDeniedError)"
    assert (diff.source_step, diff.replay_step) == ("email", "crm")

    partial = SOURCE.model_copy(update={"outcome": None, "completed": False})
    diff = only(compare_trajectories(SOURCE, partial), DiffType.OUTCOME_CHANGED)
    assert diff.explanation == "the source completed, the replay did not finish"

    # a completed run whose output is null did finish: not the same as a partial run
    null = SOURCE.model_copy(update={"outcome": None})
    assert not compare_trajectories(null, partial).same_outcome
    assert compare_trajectories(partial, partial).same_outcome


def test_outcomes_are_compared_as_canonical_json() -> None:
    a = SOURCE.model_copy(update={"outcome": {"b": 1.0, "a": "e\u0301"}})
    b = SOURCE.model_copy(update={"outcome": {"a": "\u00e9", "b": 1}})
    assert compare_trajectories(a, b).same_outcome


# answer -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (None, None, 1.0),
        ("same words", "same words", 1.0),
        ("", "", 1.0),
        (None, "", 1.0),
        (None, "hello", 0.0),
        ("hello", None, 0.0),
        ("", "hello", 0.0),
        ("one  two\nthree", "one two three", 1.0),  # only whitespace differs
        ("a b c d", "w x y z", 0.0),
        ("a b c d", "a b c e", 0.75),
    ],
)
def test_answer_similarity_edge_cases(a: str | None, b: str | None, expected: float) -> None:
    assert answer_similarity(a, b) == pytest.approx(expected)


def test_answer_changed_only_below_full_similarity_and_not_critical() -> None:
    first = SOURCE.model_decisions[1]
    reworded = SOURCE.model_copy(
        update={
            "model_decisions": (
                SOURCE.model_decisions[0],
                first.model_copy(update={"content": "Hello Carol, here is your invoice."}),
            ),
            "final_answer": "Hello Carol, here is your invoice.",
        }
    )
    base = reworded.model_copy(update={"final_answer": "Hello Bob, here is your invoice."})
    comparison = compare_trajectories(base, reworded)
    diff = only(comparison, DiffType.ANSWER_CHANGED)
    assert not diff.critical and not comparison.critical
    assert 0.0 < comparison.answer_similarity < 1.0
    assert comparison.answer_similarity == pytest.approx(
        answer_similarity(base.final_answer, reworded.final_answer)
    )
    assert diff.explanation == "final answer changed (similarity 0.88): “Bob” became “Carol”"
    assert (diff.source_step, diff.replay_step) == ("reviewer", "reviewer")
    assert comparison.first_divergent_step == "reviewer"
    assert reproduces(comparison)  # wording is not behaviour

    spaced = base.model_copy(update={"final_answer": "Hello  Bob,\nhere is your invoice."})
    assert compare_trajectories(base, spaced).diffs == ()

    silent = base.model_copy(update={"final_answer": None})
    diff = only(compare_trajectories(base, silent), DiffType.ANSWER_CHANGED)
    assert diff.explanation == "final answer changed (similarity 0.00): the replay gave none"


# first divergent step -----------------------------------------------------------------------


def test_first_divergent_step_follows_execution_order_not_diff_type() -> None:
    # a policy diff at reviewer comes after a tool diff at crm in the run
    replay = SOURCE.model_copy(
        update={
            "tool_calls": (
                tool("crm", "crm.find_by_phone", {"phone": "+1-555-0100"}),
                SOURCE.tool_calls[1],
            ),
            "policy_decisions": (policy("reviewer", "email.send", email_args("Bob"), "DENY"),),
        }
    )
    comparison = compare_trajectories(SOURCE, replay)
    assert types(comparison) == [DiffType.ARGUMENT_CHANGED, DiffType.POLICY_CHANGED]
    assert comparison.first_divergent_step == "crm"


def test_a_step_run_twice_is_told_apart() -> None:
    steps = ("act", "check", "act", "check")
    source = Trajectory(
        run_id="s",
        steps=steps,
        tool_calls=(
            tool("act", "a.b", {"n": 1}),
            tool("check", "c.d", {}),
            tool("act", "a.b", {"n": 2}),
        ),
    )
    replay = source.model_copy(
        update={
            "tool_calls": (*source.tool_calls[:2], tool("act", "a.b", {"n": 3})),
            "policy_decisions": (),
        }
    )
    comparison = compare_trajectories(source, replay)
    assert types(comparison) == [DiffType.ARGUMENT_CHANGED]
    assert comparison.diffs[0].explanation == "a.b(n=2) became a.b(n=3)"
    assert comparison.first_divergent_step == "act"


# reproduces ---------------------------------------------------------------------------------


def test_reproduces_is_same_outcome_and_same_side_effects() -> None:
    # another path (tool call arguments) to the same outcome and the same write: reproduced
    other_path = SOURCE.model_copy(
        update={
            "tool_calls": (
                tool("crm", "crm.find_by_phone", {"phone": "+15550199"}),
                SOURCE.tool_calls[1],
            )
        }
    )
    comparison = compare_trajectories(SOURCE, other_path)
    assert not comparison.same_tool_sequence and reproduces(comparison)

    no_write = SOURCE.model_copy(update={"side_effects": ()})
    assert not reproduces(compare_trajectories(SOURCE, no_write))
    other_outcome = SOURCE.model_copy(update={"outcome": {"resolution": "escalated"}})
    assert not reproduces(compare_trajectories(SOURCE, other_outcome))


# hypothesis ---------------------------------------------------------------------------------

_names = st.sampled_from(["planner", "crm", "act", "email", "run"])
_caps = st.sampled_from(["crm.get", "email.send", "payment.refund"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_hashes = st.sampled_from([canonical_hash(i) for i in range(4)])

trajectories = st.builds(
    Trajectory,
    run_id=st.just("r"),
    steps=st.lists(_names, max_size=6).map(tuple),
    model_decisions=st.lists(
        st.builds(
            ModelDecision,
            step_id=_names,
            tool_names=st.lists(_caps, max_size=3).map(tuple),
            argument_hashes=st.lists(_hashes, max_size=3).map(tuple),
            content=st.none() | st.text(max_size=20),
        ),
        max_size=4,
    ).map(tuple),
    tool_calls=st.lists(
        st.builds(
            ToolCallFact,
            step_id=_names,
            capability_id=_caps,
            request_hash=_hashes,
            arguments=_json,
            outcome=st.just("SUCCESS"),
            side_effect_class=st.just("READ"),
        ),
        max_size=5,
    ).map(tuple),
    side_effects=st.lists(
        st.builds(
            SideEffectFact,
            step_id=_names,
            capability_id=_caps,
            action_hash=_hashes,
            arguments=_json,
            status=st.sampled_from(["CONFIRMED", "UNKNOWN", "BLOCKED"]),
        ),
        max_size=4,
    ).map(tuple),
    policy_decisions=st.lists(
        st.builds(
            PolicyFact,
            step_id=_names,
            policy_id=st.just("p"),
            input_hash=_hashes,
            decision=st.sampled_from(["ALLOW", "DENY"]),
        ),
        max_size=3,
    ).map(tuple),
    outcome=_json,
    final_answer=st.none() | st.text(max_size=30),
    completed=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(trajectories)
def test_a_trajectory_compared_with_itself_has_no_diffs(t: Trajectory) -> None:
    comparison = compare_trajectories(t, t)
    assert comparison.diffs == ()
    assert comparison.same_outcome and comparison.same_tool_sequence
    assert comparison.same_side_effects and comparison.answer_similarity == 1.0
    assert comparison.first_divergent_step is None and reproduces(comparison)


@settings(max_examples=200, deadline=None)
@given(trajectories)
def test_matching_finds_no_policy_diff_where_the_same_sequence_is_skipped(t: Trajectory) -> None:
    """A replay with the same policy decisions in the same order skips the matching
    (``_same_policy_sequence``); the matching itself finds nothing there either, repeated
    decisions on one input included."""
    twice = t.model_copy(update={"policy_decisions": t.policy_decisions * 2})
    for run in (t, twice):
        with patch("models.comparison._same_policy_sequence", return_value=False):
            assert compare_trajectories(run, run).diffs == ()


@settings(max_examples=200, deadline=None)
@given(trajectories, trajectories)
def test_any_two_trajectories_compare_without_error(a: Trajectory, b: Trajectory) -> None:
    comparison = compare_trajectories(a, b)
    assert 0.0 <= comparison.answer_similarity <= 1.0
    assert (comparison.first_divergent_step is None) == all(
        d.source_step is None and d.replay_step is None for d in comparison.diffs
    )
    assert comparison.same_side_effects == (
        not any(d.type.name.startswith("SIDE_EFFECT") for d in comparison.diffs)
    )
    assert all(d.critical == d.type.name.startswith("SIDE_EFFECT") for d in comparison.diffs)
    assert comparison.same_outcome == (DiffType.OUTCOME_CHANGED not in types(comparison))


# Wilson interval ----------------------------------------------------------------------------

Z = 1.959963984540054


def closed_form(k: int, n: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval written out independently: (k + z²/2 ± z·√(k(n-k)/n + z²/4)) / (n + z²)."""
    root = z * sqrt(k * (n - k) / n + z * z / 4)
    return (k + z * z / 2 - root) / (n + z * z), (k + z * z / 2 + root) / (n + z * z)


def test_wilson_interval_known_values() -> None:
    low, high = wilson_interval(0, 50)
    assert low == 0.0 and high == pytest.approx(0.0713476, abs=1e-7)
    low, high = wilson_interval(40, 50)
    assert (low, high) == (pytest.approx(0.6696, abs=1e-4), pytest.approx(0.8876, abs=1e-4))
    low, high = wilson_interval(50, 50)
    assert high == 1.0 and low == pytest.approx(1 - 0.0713476, abs=1e-7)
    assert wilson_interval(5, 10) == (
        pytest.approx(0.2366, abs=1e-4),
        pytest.approx(0.7634, abs=1e-4),
    )


@pytest.mark.parametrize(
    ("k", "n"), [(0, 1), (1, 1), (0, 50), (1, 50), (40, 50), (17, 20), (3, 1000), (500, 1000)]
)
def test_wilson_interval_matches_the_closed_formula(k: int, n: int) -> None:
    low, high = wilson_interval(k, n)
    expected_low, expected_high = closed_form(k, n)
    assert low == pytest.approx(max(0.0, expected_low), abs=1e-12)
    assert high == pytest.approx(min(1.0, expected_high), abs=1e-12)
    assert 0.0 <= low <= k / n <= high <= 1.0
    # symmetric: k successes is n - k failures
    mirror_low, mirror_high = wilson_interval(n - k, n)
    assert low == pytest.approx(1 - mirror_high, abs=1e-12)
    assert high == pytest.approx(1 - mirror_low, abs=1e-12)


def test_wilson_interval_other_z_and_no_runs() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(40, 50, z=1.0), wilson_interval(40, 50, z=3.0)
    assert wide[0] < narrow[0] < 0.8 < narrow[1] < wide[1]
    assert narrow == (
        pytest.approx(closed_form(40, 50, 1.0)[0]),
        pytest.approx(closed_form(40, 50, 1.0)[1]),
    )


@pytest.mark.parametrize(
    ("k", "n", "z"),
    [
        (-1, 10, Z),
        (1, -1, Z),
        (11, 10, Z),
        (1.0, 10, Z),
        (1, 10.0, Z),
        (True, 10, Z),
        ("1", 10, Z),
        (1, 10, 0.0),
        (1, 10, -1.96),
        (1, 10, float("nan")),
        (1, 10, float("inf")),
    ],
)
def test_wilson_interval_refuses_bad_input(k: Any, n: Any, z: Any) -> None:
    with pytest.raises(InvalidInputError):
        wilson_interval(k, n, z)


def test_reproduction_summary() -> None:
    assert reproduction_summary(40, 50) == {
        "reproduced": 40,
        "runs": 50,
        "rate": 0.8,
        "ci95": [0.6696, 0.8876],
    }
    # 0.0713476 (often quoted as "about 0.0714") rounds to 0.0713
    assert reproduction_summary(0, 50)["ci95"] == [0.0, 0.0713]
    assert reproduction_summary(0, 0) == {
        "reproduced": 0,
        "runs": 0,
        "rate": None,
        "ci95": [0.0, 1.0],
    }
    with pytest.raises(InvalidInputError):
        reproduction_summary(3, 2)


def test_an_answer_diff_names_a_pseudonym_whole() -> None:
    bob, carol = "<name:19f93607e6824a9d>", "<name:3f4d8daaa39e2dbe>"
    base = SOURCE.model_copy(update={"final_answer": f"Hello {bob}, here is your invoice."})
    other = base.model_copy(update={"final_answer": f"Hello {carol}, here is your invoice."})
    diff = only(compare_trajectories(base, other), DiffType.ANSWER_CHANGED)
    assert diff.explanation.endswith(f"“{bob}” became “{carol}”")
    # one word changed of eight, as for plain names
    assert answer_similarity(base.final_answer, other.final_answer) == pytest.approx(0.875)
