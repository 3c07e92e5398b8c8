"""The expectation language: what a person says a run must (not) do, checked on a trajectory.

A confirming human writes expectations (``incident confirm --expect …``); each becomes an
assertion of the incident's regression case. One expectation is one line:

    no side_effect CAP [where COND [and COND]…]   no write of CAP (whose arguments satisfy
                                                   every COND); every attempted write counts
    no tool CAP                                    CAP is never called
    tool CAP called                                CAP is called at least once
    tool A called before B                         every call of B comes after a call of A
                                                   (B never called: holds)
    outcome[.PATH] OP VALUE                        the run's outcome at PATH compared to VALUE

    COND  = FIELD OP VALUE      FIELD: a dotted path into the write's arguments
    OP    = == | != | in | not in
    VALUE = "text" | 'text' | number | true | false | null | [VALUE, …] | REFERENCE
    REFERENCE = a dotted path into the run: ``input.PATH`` or ``outcome.PATH``; any other
          ``NAME.PATH`` (``ticket.customer_id``) is ``input.NAME.PATH`` when the input has a key
          NAME, else ``input.PATH`` (the input is the NAME the agent calls it by).

Examples: ``no side_effect email.send where to != ticket.customer.email``,
``tool crm.get_customer called before email.send``, ``outcome.refund_status == "RECONCILED"``.

An absent field or reference satisfies ``!=`` and ``not in`` and fails ``==`` and ``in`` (as
in ``models.regression``): a write whose arguments were not recorded is never waved through.
References into the input are bound when the regression case is written (``bind``), so a
candidate's replay is judged against what the incident's run was asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import JsonValue

from models.base import Record
from models.errors import InvalidInputError
from models.json_match import MISSING, resolve, same
from models.trajectory import Trajectory

Op = Literal["==", "!=", "in", "not in"]

_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\]|\\.)*"|'[^']*')|(?P<num>-?\d+(?:\.\d+)?(?![\w.]))"""
    r"""|(?P<op>==|!=)|(?P<punct>[\[\],])|(?P<word>[A-Za-z_][\w.\-:/]*))"""
)


class Reference(Record):
    path: str


class Value(Record):
    literal: JsonValue = None
    reference: Reference | None = None


class Condition(Record):
    field: str
    op: Op
    value: Value


class Expectation(Record):
    """A parsed expectation (``parse_expectation``)."""

    kind: Literal["no_side_effect", "no_tool", "tool_called", "tool_before", "outcome"]
    capability: str = ""
    #: ``tool_before``: the capability that must come first
    before: str = ""
    where: tuple[Condition, ...] = ()
    #: ``outcome``: the comparison on the outcome (field = path below ``outcome``, "" = whole)
    check: Condition | None = None


def _tokens(text: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidInputError(f"expectation {text!r}: cannot read {text[pos:].strip()!r}")
        kind = match.lastgroup or ""
        found.append((kind, match.group(kind)))
        pos = match.end()
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0

    def fail(self, wanted: str) -> InvalidInputError:
        rest = " ".join(v for _, v in self.tokens[self.at :]) or "the end"
        return InvalidInputError(f"expectation {self.text!r}: expected {wanted} at {rest!r}")

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, kind: str, wanted: str) -> str:
        if self.at >= len(self.tokens) or self.tokens[self.at][0] != kind:
            raise self.fail(wanted)
        self.at += 1
        return self.tokens[self.at - 1][1]

    def keyword(self, word: str) -> bool:
        if self.peek() == word:
            self.at += 1
            return True
        return False

    def expect_keyword(self, word: str) -> None:
        if not self.keyword(word):
            raise self.fail(repr(word))

    def op(self) -> Op:
        if self.at < len(self.tokens) and self.tokens[self.at][0] == "op":
            self.at += 1
            return "==" if self.tokens[self.at - 1][1] == "==" else "!="
        if self.keyword("in"):
            return "in"
        if self.keyword("not"):
            self.expect_keyword("in")
            return "not in"
        raise self.fail("==, !=, in or not in")

    def value(self) -> Value:
        if self.at >= len(self.tokens):
            raise self.fail("a value")
        kind, token = self.tokens[self.at]
        self.at += 1
        if kind == "str":
            text = json.loads(token) if token.startswith('"') else token[1:-1]
            return Value(literal=text)
        if kind == "num":
            return Value(literal=json.loads(token))
        if kind == "word" and token in ("true", "false", "null"):
            return Value(literal=json.loads(token))
        if kind == "word":
            return Value(reference=Reference(path=token))
        if token == "[":
            return Value(literal=self.list_items())
        self.at -= 1
        raise self.fail("a value")

    def list_items(self) -> list[JsonValue]:
        items: list[JsonValue] = []
        while not self.keyword("]"):
            item = self.value()
            if item.reference is not None:
                raise self.fail("a literal inside a list")
            items.append(item.literal)
            if self.peek() != "]":
                self.expect_keyword(",")
        return items

    def condition(self, field: str) -> Condition:
        op = self.op()
        value = self.value()
        if (
            op in ("in", "not in")
            and value.reference is None
            and not isinstance(value.literal, list)
        ):
            raise InvalidInputError(f"expectation {self.text!r}: {op!r} needs a list value")
        return Condition(field=field, op=op, value=value)

    def parse(self) -> Expectation:
        if self.keyword("no"):
            if self.keyword("tool"):
                parsed = Expectation(kind="no_tool", capability=self.take("word", "a tool"))
            else:
                self.expect_keyword("side_effect")
                capability = self.take("word", "a capability")
                where: list[Condition] = []
                if self.keyword("where"):
                    where.append(self.condition(self.take("word", "an argument")))
                    while self.keyword("and"):
                        where.append(self.condition(self.take("word", "an argument")))
                parsed = Expectation(
                    kind="no_side_effect", capability=capability, where=tuple(where)
                )
        elif self.keyword("tool"):
            capability = self.take("word", "a tool")
            self.expect_keyword("called")
            if self.keyword("before"):
                then = self.take("word", "a tool")
                parsed = Expectation(kind="tool_before", before=capability, capability=then)
            else:
                parsed = Expectation(kind="tool_called", capability=capability)
        else:
            path = self.take("word", "'no', 'tool' or 'outcome'")
            if path != "outcome" and not path.startswith("outcome."):
                self.at -= 1
                raise self.fail("'no', 'tool' or 'outcome'")
            parsed = Expectation(
                kind="outcome", check=self.condition(path.removeprefix("outcome").lstrip("."))
            )
        if self.at != len(self.tokens):
            raise self.fail("the end")
        return parsed


def parse_expectation(text: str) -> Expectation:
    """The expectation ``text`` parsed; ``InvalidInputError`` saying where it went wrong."""
    if not text.strip():
        raise InvalidInputError("an expectation must not be empty")
    return _Parser(text).parse()


def references(expectation: Expectation) -> list[str]:
    """The reference paths the expectation uses (to bind against the incident's run)."""
    conditions = [*expectation.where, *([expectation.check] if expectation.check else [])]
    return [c.value.reference.path for c in conditions if c.value.reference is not None]


def resolve_reference(path: str, trajectory: Trajectory) -> Any:
    """``path`` in ``trajectory`` (see the module doc); ``MISSING`` when it is not there."""
    head, _, rest = path.partition(".")
    if head == "outcome":
        return resolve(trajectory.outcome, rest) if rest else trajectory.outcome
    if head == "input":
        return resolve(trajectory.input, rest) if rest else trajectory.input
    if isinstance(trajectory.input, dict) and head in trajectory.input:
        return resolve(trajectory.input, path)
    return resolve(trajectory.input, rest) if rest else trajectory.input


def bind(expectation: Expectation, source: Trajectory) -> dict[str, JsonValue]:
    """The values of the expectation's input references in the incident's run ``source``
    (references into the outcome are judged on the trajectory under test, never bound)."""
    bound: dict[str, JsonValue] = {}
    for path in references(expectation):
        if path == "outcome" or path.startswith("outcome."):
            continue
        value = resolve_reference(path, source)
        if value is not MISSING:
            bound[path] = value
    return bound


def _holds(actual: Any, op: Op, expected: Any) -> bool:
    if op in ("==", "!="):
        equal = actual is not MISSING and expected is not MISSING and same(actual, expected)
        return equal if op == "==" else not equal
    values = expected if isinstance(expected, list) else []
    member = actual is not MISSING and any(same(actual, v) for v in values)
    return member if op == "in" else not member


def _value(value: Value, trajectory: Trajectory, bound: Mapping[str, JsonValue]) -> Any:
    if value.reference is None:
        return value.literal
    path = value.reference.path
    return bound[path] if path in bound else resolve_reference(path, trajectory)


def _show(value: Any) -> str:
    text = "absent" if value is MISSING else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def check_expectation(
    expectation: Expectation,
    trajectory: Trajectory,
    bound: Mapping[str, JsonValue] | None = None,
) -> str | None:
    """Why ``trajectory`` breaks the expectation, in one line; None when it holds. ``bound``:
    the input references' values in the incident's run (``bind``)."""
    e, bound = expectation, bound or {}
    calls = [c.capability_id for c in trajectory.tool_calls]
    if e.kind == "no_side_effect":
        for effect in trajectory.side_effects:
            if effect.capability_id == e.capability and all(
                _holds(resolve(effect.arguments, c.field), c.op, _value(c.value, trajectory, bound))
                for c in e.where
            ):
                shown = ", ".join(
                    f"{c.field}={_show(resolve(effect.arguments, c.field))}" for c in e.where
                )
                return f"{e.capability} in step {effect.step_id} ({effect.status}){' with ' + shown if shown else ''} is forbidden"
        return None
    if e.kind == "no_tool":
        return f"{e.capability} was called" if e.capability in calls else None
    if e.kind == "tool_called":
        return None if e.capability in calls else f"{e.capability} was never called"
    if e.kind == "tool_before":
        for index, name in enumerate(calls):
            if name == e.capability and e.before not in calls[:index]:
                return f"{e.capability} was called before any {e.before} in: {' → '.join(calls)}"
        return None
    assert e.check is not None
    c = e.check
    actual = resolve(trajectory.outcome, c.field) if c.field else trajectory.outcome
    expected = _value(c.value, trajectory, bound)
    if _holds(actual, c.op, expected):
        return None
    where = f"outcome.{c.field}" if c.field else "outcome"
    return f"{where} is {_show(actual)}, expected {c.op} {_show(expected)}"
