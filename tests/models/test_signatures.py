"""Failure signatures: built from structured facts only, stable across incidents (pure)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import models.signatures as sig
from models import AgentFailureType, SideEffectStatus
from models.signatures import (
    RUN_ERRORS,
    FailureFacts,
    FixtureMissFact,
    NonUniqueLookupFact,
    PolicyDenialFact,
    RefusalFact,
    SideEffectFacts,
    classify,
    signature_key,
)

U = SideEffectStatus


def refund(**changes: object) -> SideEffectFacts:
    base: dict[str, object] = {
        "capability_id": "payment.refund",
        "final_status": U.UNKNOWN,
        "outcome_was_unknown": True,
        "side_effect_ids": ("se-1",),
    }
    return SideEffectFacts.model_validate({**base, **changes})


def wrong_recipient(**changes: object) -> NonUniqueLookupFact:
    base: dict[str, object] = {
        "capability_id": "crm.find_by_phone",
        "key_names": ("phone",),
        "match_count": 2,
        "id_field": "customer_id",
        "asked_id": "C-2002",
        "taken_id": "C-2001",
        "write_capability_id": "email.send",
        "write_field": "to",
    }
    return NonUniqueLookupFact.model_validate({**base, **changes})


def test_reference_refund_timeout_is_unknown_no_retry() -> None:
    result = classify(FailureFacts(run_id="run-1", side_effects=(refund(),)))
    assert result.signature == "SIDE_EFFECT_UNKNOWN_NO_RETRY"
    assert result.failure_type is AgentFailureType.SIDE_EFFECT
    assert result.qualifier == "payment.refund" and result.contributing == ()
    assert "payment.refund" in result.explanation


@pytest.mark.parametrize(
    ("duplicated", "signature"),
    [
        (True, "SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE"),
        (None, "SIDE_EFFECT_UNKNOWN_RETRY_UNRESOLVED"),
        (False, "SIDE_EFFECT_UNKNOWN_RETRY_NO_DUPLICATE"),
    ],
)
def test_unknown_and_retried_is_signed_by_what_the_provider_did(
    duplicated: bool | None, signature: str
) -> None:
    effect = refund(final_status=U.RECONCILED, retry_attempted=True, duplicated=duplicated)
    result = classify(FailureFacts(side_effects=(effect,)))
    assert (result.signature, result.failure_type) == (signature, AgentFailureType.SIDE_EFFECT)


def test_reconciliation_does_not_change_the_signature() -> None:
    before = FailureFacts(side_effects=(refund(),))
    after = FailureFacts(side_effects=(refund(final_status=U.RECONCILED, reconciled_applied=True),))
    assert classify(before) == classify(after)


def test_wrong_customer_is_a_data_failure_named_by_its_shape() -> None:
    result = classify(FailureFacts(completed=True, nonunique_lookups=(wrong_recipient(),)))
    assert result.signature == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    assert result.failure_type is AgentFailureType.DATA
    assert result.qualifier == "crm.find_by_phone(phone)->email.send.to"
    unwritten = wrong_recipient(write_capability_id=None, write_field=None)
    assert classify(FailureFacts(nonunique_lookups=(unwritten,))).signature == (
        "DATA_NONUNIQUE_LOOKUP_WRONG_ENTITY"
    )


def test_same_facts_give_the_same_signature_and_key() -> None:
    one = FailureFacts(side_effects=(refund(retry_attempted=True, duplicated=True),))
    two = FailureFacts(side_effects=(refund(retry_attempted=True, duplicated=True),))
    assert classify(one) == classify(two)
    assert signature_key(one) == signature_key(two)
    assert re.fullmatch(r"SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE:[0-9a-f]{8}", signature_key(one))


@settings(max_examples=60, deadline=None)
@given(
    run_id=st.text(min_size=1, max_size=20),
    ids=st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3),
    asked=st.text(min_size=1, max_size=12),
    taken=st.text(min_size=1, max_size=12),
    matches=st.integers(min_value=2, max_value=50),
    outcome=st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3),
)
def test_ids_counts_and_outcome_never_change_the_signature(
    run_id, ids, asked, taken, matches, outcome
) -> None:
    reference = classify(
        FailureFacts(side_effects=(refund(),), nonunique_lookups=(wrong_recipient(),))
    )
    other = classify(
        FailureFacts(
            run_id=run_id,
            outcome=outcome,
            side_effects=(refund(side_effect_ids=tuple(ids)),),
            nonunique_lookups=(
                wrong_recipient(asked_id=asked, taken_id=taken, match_count=matches),
            ),
        )
    )
    assert other == reference


def test_the_order_facts_were_recorded_in_does_not_matter() -> None:
    effects = (
        refund(),
        refund(capability_id="email.send"),
        refund(capability_id="crm.update", outcome_was_unknown=False, final_status=U.FAILED),
    )
    forward = classify(FailureFacts(side_effects=effects))
    backward = classify(FailureFacts(side_effects=tuple(reversed(effects))))
    assert forward == backward
    assert forward.qualifier == "email.send"  # ties between capabilities break by name
    assert forward.contributing == ("TOOL_WRITE_REJECTED",)


def test_precedence_money_twice_before_wrong_recipient_before_unknown() -> None:
    facts = FailureFacts(
        side_effects=(refund(retry_attempted=True, duplicated=True), refund(capability_id="x")),
        nonunique_lookups=(wrong_recipient(),),
        policy_denials=(PolicyDenialFact(policy_id="p", capability_id="payment.refund"),),
    )
    result = classify(facts)
    assert result.signature == "SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE"
    assert result.contributing == (
        "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT",
        "SIDE_EFFECT_UNKNOWN_NO_RETRY",
        "POLICY_DENIED_ACTION",
    )
    duplicate = refund(outcome_was_unknown=False, final_status=U.CONFIRMED, duplicated=True)
    assert classify(FailureFacts(side_effects=(duplicate,))).signature == "SIDE_EFFECT_DUPLICATE"
    healthy = refund(outcome_was_unknown=False, final_status=U.CONFIRMED)
    assert classify(FailureFacts(side_effects=(healthy,))).signature == (
        "MODEL_DECISION_UNEXPLAINED"
    )


def test_approval_refusal_and_the_error_it_raised_are_one_signature() -> None:
    facts = FailureFacts(
        completed=False,
        run_error_type="ApprovalDeniedError",
        approval_refusals=(
            RefusalFact(capability_id="payment.refund", error="ApprovalDeniedError"),
        ),
    )
    result = classify(facts)
    assert (result.signature, result.failure_type) == ("APPROVAL_DENIED", AgentFailureType.APPROVAL)
    assert result.qualifier == "payment.refund" and result.contributing == ()
    # the error alone (refusal not recorded) still signs the same
    alone = classify(FailureFacts(completed=False, run_error_type="ApprovalExpiredError"))
    assert alone.signature == "APPROVAL_EXPIRED"


def test_policy_denials_attempted_or_respected() -> None:
    attempted = PolicyDenialFact(policy_id="p", capability_id="payment.refund", attempted=True)
    respected = attempted.model_copy(update={"attempted": False})
    assert classify(FailureFacts(policy_denials=(attempted,))).signature == (
        "POLICY_DENIED_ACTION_ATTEMPTED"
    )
    result = classify(FailureFacts(policy_denials=(respected,)))
    assert (result.signature, result.failure_type) == (
        "POLICY_DENIED_ACTION",
        AgentFailureType.POLICY,
    )


def test_fixture_misses_are_tool_or_retrieval() -> None:
    tool = classify(
        FailureFacts(
            fixture_misses=(FixtureMissFact(capability_id="crm.get_customer", policy="FAIL"),)
        )
    )
    kb = classify(
        FailureFacts(
            fixture_misses=(FixtureMissFact(capability_id="knowledge.search", policy="FAIL"),)
        )
    )
    assert (tool.signature, tool.failure_type) == ("TOOL_FIXTURE_MISS", AgentFailureType.TOOL)
    assert (kb.signature, kb.failure_type) == ("RETRIEVAL_FIXTURE_MISS", AgentFailureType.RETRIEVAL)


def test_run_errors_known_and_unclassified() -> None:
    known = classify(FailureFacts(completed=False, run_error_type="StateMigrationError"))
    assert (known.signature, known.failure_type) == (
        "RUN_FAILED_STATE_MIGRATION",
        AgentFailureType.STATE,
    )
    a = classify(FailureFacts(completed=False, run_error_type="KeyError"))
    b = classify(FailureFacts(completed=False, run_error_type="ZeroDivisionError"))
    assert a.signature == b.signature == "RUN_FAILED_UNCLASSIFIED"
    assert a.failure_type is AgentFailureType.INFRASTRUCTURE and a.qualifier == "KeyError"
    assert a.key != b.key  # the key tells the two error types apart


def test_signature_key_tells_capabilities_apart() -> None:
    refund_dup = FailureFacts(side_effects=(refund(retry_attempted=True, duplicated=True),))
    email_dup = FailureFacts(
        side_effects=(refund(capability_id="email.send", retry_attempted=True, duplicated=True),)
    )
    assert classify(refund_dup).signature == classify(email_dup).signature
    assert signature_key(refund_dup) != signature_key(email_dup)


def test_every_signature_is_documented_in_the_table() -> None:
    doc = sig.__doc__ or ""
    rows = [name for name in sig._ROWS if name not in {"APPROVAL", "RUN_FAILED"}]
    rows += [
        signature for signature, _ in RUN_ERRORS.values() if not signature.startswith("RUN_FAILED_")
    ]
    for name in rows:
        short = name.replace("APPROVAL_", "_") if name.startswith("APPROVAL_") else name
        assert f"``{name}``" in doc or f"``{short}``" in doc, name
    for signature, failure_type in RUN_ERRORS.values():
        assert signature.isupper() and isinstance(failure_type, AgentFailureType)


def test_facts_round_trip_through_json() -> None:
    facts = FailureFacts(
        run_id="run-1",
        completed=False,
        run_error_type="ApprovalDeniedError",
        outcome={"error": "ApprovalDeniedError"},
        side_effects=(refund(),),
        nonunique_lookups=(wrong_recipient(),),
    )
    again = FailureFacts.model_validate_json(facts.model_dump_json())
    assert again == facts and classify(again) == classify(facts)
    with pytest.raises(ValueError):
        FailureFacts.model_validate({"surprise": 1})


def test_a_write_beyond_its_grant_is_authority() -> None:
    from models.signatures import AuthorityFact

    facts = FailureFacts(
        side_effects=(refund(final_status=U.CONFIRMED, outcome_was_unknown=False),),
        authority_violations=(AuthorityFact(capability_id="payment.refund", reason="unapproved"),),
    )
    c = classify(facts)
    assert c.failure_type is AgentFailureType.AUTHORITY
    assert c.signature == "AUTHORITY_WRITE_BEYOND_GRANT"
    assert c.qualifier == "payment.refund:unapproved"
    denied = classify(
        FailureFacts(authority_violations=(AuthorityFact(capability_id="x.y", reason="denied"),))
    )
    assert denied.key != c.key


def test_a_prompt_swap_that_fixes_it_is_prompt_only_where_nothing_else_explains_it() -> None:
    alone = classify(FailureFacts(prompt_swap_fixes=True))
    assert alone.failure_type is AgentFailureType.PROMPT
    assert alone.signature == "PROMPT_SWAP_FIXES"
    with_data = classify(
        FailureFacts(nonunique_lookups=(wrong_recipient(),), prompt_swap_fixes=True)
    )
    assert with_data.signature == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    assert "PROMPT_SWAP_FIXES" in with_data.contributing


def test_prompt_swap_fixes_reads_the_incident_replays() -> None:
    from models import ReplayMode
    from models.incident_flow import IncidentReplay, prompt_swap_fixes

    def replay(label: str, reproduced: int) -> IncidentReplay:
        return IncidentReplay(
            replay_id=label,
            label=label,
            mode=ReplayMode.EXACT,
            status="COMPLETED",
            reproduced=reproduced,
            runs=5,
        )

    assert prompt_swap_fixes((replay("exact", 4), replay("prompt=v18", 0)))
    assert not prompt_swap_fixes((replay("exact", 0), replay("prompt=v18", 0)))
    assert not prompt_swap_fixes((replay("exact", 4), replay("prompt=v18", 1)))
    assert not prompt_swap_fixes((replay("exact", 4), replay("model=m", 0)))
