"""The regression case an incident leaves behind: structural assertions derived from the
structured failure facts (never from free text), plus any the confirming human adds."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from models.enums import AgentFailureType
from models.expectations import bind, parse_expectation
from models.regression import (
    ArgumentConstraint,
    ConstraintOp,
    ExpectedOutcome,
    ForbiddenSideEffect,
    ForbiddenToolSequence,
    HumanExpectation,
    RegressionAssertion,
    RegressionCase,
)
from models.signatures import FailureFacts
from models.trajectory import Trajectory


def derived_assertions(facts: FailureFacts, source: Trajectory) -> list[RegressionAssertion]:
    """What must never happen again, read off the facts:

    * a write that named the wrong entity after a non-unique lookup: that write, to that
      entity, is forbidden; and where the outcome names the entity, the one asked about is
      expected;
    * a write whose outcome was UNKNOWN: attempting it twice is forbidden (a retry without
      reconciliation is how a refund is paid twice).
    """
    assertions: list[RegressionAssertion] = []
    for lookup in facts.nonunique_lookups:
        if lookup.write_capability_id and lookup.write_field:
            written = next(
                (
                    effect.arguments.get(lookup.write_field)
                    for effect in source.side_effects
                    if effect.capability_id == lookup.write_capability_id
                    and isinstance(effect.arguments, dict)
                ),
                None,
            )
            if written is not None:
                assertions.append(
                    ForbiddenSideEffect(
                        capability_id=lookup.write_capability_id,
                        where=(
                            ArgumentConstraint(
                                field=lookup.write_field, op=ConstraintOp.EQUAL, value=written
                            ),
                        ),
                    )
                )
        if isinstance(source.outcome, dict) and lookup.id_field in source.outcome:
            assertions.append(ExpectedOutcome(contains={lookup.id_field: lookup.asked_id}))
    for effect in facts.side_effects:
        if effect.outcome_was_unknown:
            assertions.append(
                ForbiddenToolSequence(capability_ids=(effect.capability_id, effect.capability_id))
            )
    return _unique(assertions)


def human_assertions(expectations: Sequence[str], source: Trajectory) -> list[HumanExpectation]:
    """The confirming person's expectations as assertions, their input references bound to
    the incident's run ``source`` (so candidates are judged against what it was asked)."""
    return [
        HumanExpectation(text=text, bound=bind(parse_expectation(text), source))
        for text in expectations
    ]


def regression_case_for(
    *,
    case_id: str,
    incident_id: str,
    source_run_id: str,
    facts: FailureFacts,
    source: Trajectory,
    description: str,
    extra: Sequence[RegressionAssertion] = (),
    now: datetime,
    failure_type: AgentFailureType | None = None,
) -> RegressionCase | None:
    """The case, or None when neither the facts nor the human give anything to assert."""
    assertions = _unique([*derived_assertions(facts, source), *extra])
    if not assertions:
        return None
    return RegressionCase(
        case_id=case_id,
        incident_id=incident_id,
        source_run_id=source_run_id,
        created_at=now,
        description=description,
        failure_type=failure_type,
        assertions=tuple(assertions),
    )


def _unique(assertions: list[RegressionAssertion]) -> list[RegressionAssertion]:
    seen: list[RegressionAssertion] = []
    for assertion in assertions:
        if assertion not in seen:
            seen.append(assertion)
    return seen
