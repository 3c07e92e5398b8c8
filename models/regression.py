"""Regression cases: an incident's expected behaviour as structural assertions (pure).

A case is written once a human has confirmed the root cause, and it gates every later release
until it is explicitly retired. It never compares wording: it asserts behaviour (rule 13).

- ``ForbiddenSideEffect``: no write of ``capability_id`` whose arguments satisfy every
  ``where`` constraint (none: no write of that capability at all). ``{"field": "to", "op":
  "not_equal", "value": "carol@example.com"}`` forbids every email not addressed to carol.
  Every write the agent attempted counts, whatever its status (a replay's writes are BLOCKED,
  a provider may reject one): the agent's behaviour is judged, not the provider's luck.
  A field that is absent satisfies ``not_equal``/``not_in`` and fails ``equal``/``in``, so a
  write whose arguments were not recorded is treated as forbidden, never waved through.
- ``RequiredToolSequence`` / ``ForbiddenToolSequence``: an ordered, not necessarily contiguous,
  subsequence of the capability ids of the run's tool calls.
- ``ExpectedOutcome``: a JSON subset of the outcome: objects recursively by key, arrays
  element-wise (equal length), scalars by JSON equality (``true`` is not ``1``).
- ``HumanExpectation``: a line of the expectation language (``models.expectations``) that the
  confirming person wrote.

A case also requires by default that the run completed: a partial run (budget, crash) cannot
show that a forbidden write would not have come later.
"""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, model_validator

from models.base import HashedRecord, Identifier, Instant, Record
from models.enums import AgentFailureType
from models.errors import ConflictError, InvalidInputError
from models.expectations import check_expectation, parse_expectation
from models.json_match import MISSING, resolve, same
from models.trajectory import Trajectory

_MISSING: Any = MISSING
_resolve = resolve
_same = same
_MAX_VALUE = 40


class RegressionCaseStatus(StrEnum):
    ACTIVE = "ACTIVE"
    RETIRED = "RETIRED"


class ConstraintOp(StrEnum):
    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    IN = "in"
    NOT_IN = "not_in"


class ArgumentConstraint(Record):
    #: dotted path into the write's arguments, e.g. ``to`` or ``address.country``
    field: str = Field(min_length=1)
    op: ConstraintOp
    value: JsonValue

    @model_validator(mode="after")
    def _list_for_membership(self) -> ArgumentConstraint:
        if self.op in (ConstraintOp.IN, ConstraintOp.NOT_IN) and not isinstance(self.value, list):
            raise ValueError(f"op {self.op.value!r} needs a list value, got {self.value!r}")
        return self

    def holds(self, arguments: Any) -> bool:
        """Whether ``arguments`` satisfy the constraint (absent field: see the module doc)."""
        actual = _resolve(arguments, self.field)
        if self.op in (ConstraintOp.EQUAL, ConstraintOp.NOT_EQUAL):
            equal = actual is not _MISSING and _same(actual, self.value)
            return equal if self.op is ConstraintOp.EQUAL else not equal
        values = self.value if isinstance(self.value, list) else []  # a list (the validator)
        member = actual is not _MISSING and any(_same(actual, v) for v in values)
        return member if self.op is ConstraintOp.IN else not member


class ForbiddenSideEffect(Record):
    kind: Literal["forbidden_side_effect"] = "forbidden_side_effect"
    capability_id: Identifier
    where: tuple[ArgumentConstraint, ...] = ()


class RequiredToolSequence(Record):
    kind: Literal["required_tool_sequence"] = "required_tool_sequence"
    capability_ids: tuple[Identifier, ...] = Field(min_length=1)


class ForbiddenToolSequence(Record):
    kind: Literal["forbidden_tool_sequence"] = "forbidden_tool_sequence"
    capability_ids: tuple[Identifier, ...] = Field(min_length=1)


class ExpectedOutcome(Record):
    kind: Literal["expected_outcome"] = "expected_outcome"
    contains: JsonValue


class HumanExpectation(Record):
    """An expectation a person wrote when confirming the root cause (``models.expectations``),
    with its input references bound to the incident's run."""

    kind: Literal["expectation"] = "expectation"
    text: str = Field(min_length=1)
    bound: dict[str, JsonValue] = Field(default_factory=dict)


RegressionAssertion = Annotated[
    ForbiddenSideEffect
    | RequiredToolSequence
    | ForbiddenToolSequence
    | ExpectedOutcome
    | HumanExpectation,
    Field(discriminator="kind"),
]


class RegressionCase(HashedRecord):
    case_id: Identifier
    incident_id: Identifier
    source_run_id: Identifier
    created_at: Instant
    status: RegressionCaseStatus = RegressionCaseStatus.ACTIVE
    retired_reason: str | None = None
    retired_at: Instant | None = None
    description: str = ""
    #: the incident's failure type when the case was made: the human's confirmed one when
    #: given, else the automatic classification's
    failure_type: AgentFailureType | None = None
    require_completed: bool = True
    assertions: tuple[RegressionAssertion, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _retired_has_reason(self) -> RegressionCase:
        retired = self.status is RegressionCaseStatus.RETIRED
        if retired != bool(self.retired_reason and self.retired_reason.strip()):
            raise ValueError("a RETIRED case needs a retired_reason; an ACTIVE case has none")
        return self


class AssertionFailure(Record):
    #: position in ``case.assertions``; -1 for the completion requirement
    index: int
    kind: str
    assertion: str
    reason: str


class CaseResult(Record):
    case_id: str
    run_id: str
    passed: bool
    failures: tuple[AssertionFailure, ...] = ()


def retire_case(case: RegressionCase, reason: str, at: datetime) -> RegressionCase:
    """The case retired for ``reason`` (non-empty) at instant ``at``; a case is never deleted."""
    if not reason.strip():
        raise InvalidInputError(f"retiring regression case {case.case_id} needs a reason")
    if case.status is RegressionCaseStatus.RETIRED:
        raise ConflictError(
            f"regression case {case.case_id} is already retired: {case.retired_reason}"
        )
    update = {"status": RegressionCaseStatus.RETIRED, "retired_reason": reason, "retired_at": at}
    return RegressionCase.model_validate({**case.model_dump(), **update})


def _short(value: Any) -> str:
    # objects and lists as JSON (what the evidence is), never as Python dicts; scalars quoted
    if isinstance(value, dict | list | tuple):
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    else:
        text = repr(value)
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def describe(assertion: RegressionAssertion) -> str:
    """A one-line statement of the assertion, for results and reports."""
    if isinstance(assertion, ForbiddenSideEffect):
        where = " and ".join(f"{c.field} {c.op.value} {_short(c.value)}" for c in assertion.where)
        return f"no {assertion.capability_id}" + (f" where {where}" if where else "")
    if isinstance(assertion, ExpectedOutcome):
        return f"outcome contains {_short(assertion.contains)}"
    if isinstance(assertion, HumanExpectation):
        return assertion.text
    sequence = " → ".join(assertion.capability_ids)
    verb = "requires" if isinstance(assertion, RequiredToolSequence) else "forbids"
    return f"{verb} tool sequence {sequence}"


def _subsequence(calls: list[str], pattern: tuple[str, ...]) -> int:
    """How many leading items of ``pattern`` occur in order in ``calls``."""
    matched = 0
    for name in calls:
        if matched < len(pattern) and name == pattern[matched]:
            matched += 1
    return matched


def _mismatch(actual: Any, expected: Any, path: str) -> str | None:
    """Where ``actual`` does not contain ``expected``, as a one-line reason; None if it does."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path} is {_short(actual)}, expected an object"
        for key, item in expected.items():
            if key not in actual:
                return f"{path}.{key} is missing, expected {_short(item)}"
            found = _mismatch(actual[key], item, f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return f"{path} is {_short(actual)}, expected {_short(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found = _mismatch(a, e, f"{path}[{i}]")
            if found:
                return found
        return None
    return (
        None
        if _same(actual, expected)
        else f"{path} is {_short(actual)}, expected {_short(expected)}"
    )


def _check(assertion: RegressionAssertion, trajectory: Trajectory) -> str | None:
    calls = [c.capability_id for c in trajectory.tool_calls]
    if isinstance(assertion, ForbiddenSideEffect):
        for effect in trajectory.side_effects:
            if effect.capability_id == assertion.capability_id and all(
                c.holds(effect.arguments) for c in assertion.where
            ):
                values = [(c.field, _resolve(effect.arguments, c.field)) for c in assertion.where]
                shown = ", ".join(
                    f"{f} absent" if v is _MISSING else f"{f}={_short(v)}" for f, v in values
                )
                where = f" with {shown}" if shown else ""
                return f"{effect.capability_id} in step {effect.step_id} ({effect.status}){where} is forbidden"
        return None
    if isinstance(assertion, ExpectedOutcome):
        return _mismatch(trajectory.outcome, assertion.contains, "outcome")
    if isinstance(assertion, HumanExpectation):
        return check_expectation(parse_expectation(assertion.text), trajectory, assertion.bound)
    matched = _subsequence(calls, assertion.capability_ids)
    complete = matched == len(assertion.capability_ids)
    shown = " → ".join(calls) or "no tool calls"
    if isinstance(assertion, RequiredToolSequence) and not complete:
        return f"missing {assertion.capability_ids[matched]} after the first {matched} in: {shown}"
    if isinstance(assertion, ForbiddenToolSequence) and complete:
        return f"the forbidden sequence occurs in: {shown}"
    return None


def evaluate_case(case: RegressionCase, trajectory: Trajectory) -> CaseResult:
    """Evaluate every assertion of ``case`` on ``trajectory``; each failure says why in a line."""
    failures = []
    if case.require_completed and not trajectory.completed:
        reason = f"the run did not complete (outcome {_short(trajectory.outcome)})"
        failures.append(
            AssertionFailure(index=-1, kind="completed", assertion="run completes", reason=reason)
        )
    for index, assertion in enumerate(case.assertions):
        problem = _check(assertion, trajectory)
        if problem is not None:
            failures.append(
                AssertionFailure(
                    index=index, kind=assertion.kind, assertion=describe(assertion), reason=problem
                )
            )
    return CaseResult(
        case_id=case.case_id,
        run_id=trajectory.run_id,
        passed=not failures,
        failures=tuple(failures),
    )
