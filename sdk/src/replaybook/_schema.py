"""The OpenAI tool schema of a Python function: parameters from its signature and type hints,
descriptions from its docstring (Google ``Args:`` or Sphinx ``:param x:`` style)."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections import abc
from collections.abc import Callable
from typing import Any

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    tuple: "array",
    set: "array",
}
_SPHINX = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+):\s*(.*)$")
_GOOGLE_ARG = re.compile(r"^\s{2,}(\*{0,2}\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


def type_schema(hint: Any) -> dict[str, Any]:
    """JSON Schema of a type hint (what it cannot say becomes an unconstrained value)."""
    if hint is inspect.Parameter.empty or hint is Any:
        return {}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        return (
            type_schema(options[0])
            if len(options) == 1
            else {"anyOf": [type_schema(a) for a in options]}
        )
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset, abc.Sequence, abc.Iterable):
        schema: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = type_schema(args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [m.value for m in hint]}
    model_schema = getattr(hint, "model_json_schema", None)  # pydantic models
    if callable(model_schema):
        return dict(model_schema())
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    return {}


def doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary of ``fn``'s docstring and its parameters' descriptions."""
    doc = inspect.getdoc(fn) or ""
    lines = doc.splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    for line in lines:
        sphinx = _SPHINX.match(line)
        if sphinx:
            params[sphinx.group(1)] = sphinx.group(2).strip()
            continue
        if line.strip().lower() in ("args:", "arguments:", "parameters:"):
            in_args = True
            continue
        if in_args:
            google = _GOOGLE_ARG.match("  " + line if not line.startswith(" ") else line)
            if line.strip() and not line.startswith(" ") and line.rstrip().endswith(":"):
                in_args = False  # the next section (Returns:, Raises:)
                continue
            if google and line.startswith(" "):
                params[google.group(1).lstrip("*")] = google.group(2).strip()
            continue
        if not params and not line.strip().startswith(":"):
            summary.append(line)
    text = "\n".join(summary).strip()
    return text.split("\n\n")[0].replace("\n", " "), params


def function_schema(fn: Callable[..., Any], name: str, description: str | None) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    summary, described = doc_parts(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or param.name in ("self", "cls"):
            continue
        schema = type_schema(hints.get(param.name, param.annotation))
        if param.name in described:
            schema["description"] = described[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is None or isinstance(param.default, str | int | float | bool):
            schema["default"] = param.default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description if description is not None else summary,
            "parameters": parameters,
        },
    }
