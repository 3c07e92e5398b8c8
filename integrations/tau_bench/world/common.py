"""What every domain's tools share: refusals, JSON answers, calculate/think/transfer.

A tool answers with a string, as the benchmark's tools do: a JSON document, a plain message,
or ``Error: <why>`` when it refuses. A refusal is raised as ``Refusal`` inside this package
and turned into that string by ``DomainTools.call``; it never escapes the package (it is the
simulated domain's answer, not a Replaybook error). A tool checks everything before it changes
anything, so a refused call leaves the world as it was.

Byte for byte: the benchmark's environment answers any exception a tool raises with
``Error: <exception text>``, so the tools here make their checks in the benchmark's order and
let the same Python exceptions surface (a missing key is ``Error: 'date'``); an argument-name
mismatch names the benchmark's tool class (``BookReservation.invoke() missing 1 required
positional argument: 'cabin'``), the tool name in CamelCase.
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
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(right, int | float) and abs(right) > 4096:
            # the one place we part from the benchmark: "9**9**9" would never finish
            raise Refusal("exponent too large")
        return _OPERATORS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Tuple):
        return tuple(_evaluate(item) for item in node.elts)
    if isinstance(node, ast.Call):  # "2(3)": calling a number, once its argument is evaluated
        function = _evaluate(node.func)
        for argument in node.args:
            _evaluate(argument)
        raise TypeError(f"'{type(function).__name__}' object is not callable")
    raise Refusal("invalid characters in expression")


def calculate(expression: str) -> str:
    """Arithmetic on numbers with + - * / ** // and parentheses, as Python evaluates it; the
    answer is rounded to cents and always printed as a float ("498.0"). Evaluated on a parsed
    tree, never eval; what fails answers the exception's text, as the benchmark does (the
    syntax error names ``<string>``, the file name eval gives)."""
    if not all(c in "0123456789+-*/(). " for c in expression):
        raise Refusal("invalid characters in expression")
    try:
        tree = compile(expression, "<string>", "eval", ast.PyCF_ONLY_AST)
        return str(round(float(_evaluate(tree)), 2))
    except Refusal:
        raise
    except Exception as exc:  # the benchmark answers any failure with its text
        raise Refusal(str(exc)) from None


def _benchmark_signature(message: str, owner: str, name: str) -> str:
    """A TypeError about our method's arguments, naming the benchmark's tool class instead
    (``AirlineTools.tool_book_reservation()`` -> ``BookReservation.invoke()``)."""
    ours = f"{owner}.tool_{name}()"
    theirs = "".join(part.capitalize() for part in name.split("_")) + ".invoke()"
    return message.replace(ours, theirs)


class DomainTools:
    """A domain's tools over one World; subclasses add one method per tool (``tool_<name>``)."""

    domain = ""

    def __init__(self, world: World) -> None:
        self.world = world

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(n[len("tool_") :] for n in dir(self) if n.startswith("tool_")))

    def call(self, name: str, arguments: Any) -> str:
        """Run one tool call; a refusal, unusable arguments or any failure of the tool answer
        ``Error: ...`` (the benchmark's environment catches every exception of a tool)."""
        method = getattr(self, f"tool_{name}", None)
        if method is None:
            return f"Unknown action {name}"
        if not isinstance(arguments, dict):
            return "Error: the arguments are not a JSON object"
        try:
            return method(**arguments)
        except Refusal as exc:
            return f"Error: {exc}"
        except TypeError as exc:
            return f"Error: {_benchmark_signature(str(exc), type(self).__name__, name)}"
        except Exception as exc:  # the benchmark answers every exception
            return f"Error: {exc}"

    # tools without state, the same in both domains

    def tool_calculate(self, expression: str) -> str:
        return calculate(expression)

    def tool_think(self, thought: str) -> str:
        return ""

    def tool_transfer_to_human_agents(self, summary: str) -> str:
        return "Transfer successful"
