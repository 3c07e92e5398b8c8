"""What every domain's tools share: refusals, JSON answers, calculate/think/transfer.

A tool answers with a string, as the benchmark's tools do: a JSON document, a plain message,
or ``Error: <why>`` when it refuses. A refusal is raised as ``Refusal`` inside this package
and turned into that string by ``DomainTools.call``; it never escapes the package (it is the
simulated domain's answer, not a Replaybook error). A tool checks everything before it changes
anything, so a refused call leaves the world as it was.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

from integrations.tau_bench.world.db import World

__all__ = ["DomainTools", "Refusal", "calculate", "dumps"]


class Refusal(Exception):
    """The tool refuses the call; the message becomes the answer ``Error: <message>``."""


def dumps(value: Any) -> str:
    """A tool's JSON answer, formatted as the recorded answers are (json.dumps defaults)."""
    return json.dumps(value)


_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    raise Refusal("Invalid characters in expression")


def calculate(expression: str) -> str:
    """Arithmetic on numbers with + - * / and parentheses; the answer is rounded to cents and
    always printed as a float ("498.0"), as recorded. Evaluated on a parsed tree, never eval."""
    if not isinstance(expression, str) or not all(c in "0123456789+-*/(). " for c in expression):
        raise Refusal("Invalid characters in expression")
    try:
        tree = ast.parse(expression, mode="eval")
        return str(round(float(_evaluate(tree)), 2))
    except SyntaxError:
        raise Refusal("invalid syntax") from None
    except ZeroDivisionError:
        raise Refusal("division by zero") from None


class DomainTools:
    """A domain's tools over one World; subclasses add one method per tool (``tool_<name>``)."""

    domain = ""

    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(n[len("tool_") :] for n in dir(self) if n.startswith("tool_")))

    def call(self, name: str, arguments: Any) -> str:
        """Run one tool call; a refusal or unusable arguments answer ``Error: ...``."""
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            return f"Unknown action {name}"
        if not isinstance(arguments, dict):
            return "Error: the arguments are not a JSON object"
        try:
            return method(**arguments)
        except Refusal as exc:
            return f"Error: {exc}"
        except TypeError as exc:  # a missing or unexpected argument name
            return f"Error: {exc}"

    # tools without state, the same in both domains

    def tool_calculate(self, expression: str) -> str:
        return calculate(expression)

    def tool_think(self, thought: str) -> str:
        return ""

    def tool_transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"
