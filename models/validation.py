"""A pydantic ``ValidationError`` as the one-line ``InvalidInputError`` a user reads: the
field (or the option or API field it came from) and the rule it breaks, in words."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from models.errors import InvalidInputError

M = TypeVar("M", bound=BaseModel)


def rule_of(error: Mapping[str, Any]) -> str:
    """One pydantic error as the rule it breaks, in words (``must not be empty``)."""
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {n} characters"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return f"needs at least {n} item{'s' if n != 1 else ''}"
    if kind == "missing":
        return "is required"
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the allowed values')}"
    message = str(error.get("msg", "is invalid"))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return message[:1].lower() + message[1:]


def field_name(loc: tuple[Any, ...], options: Mapping[str, str]) -> str:
    """The option a model field came from (``options``), else the field's dotted path."""
    path = ".".join(str(part) for part in loc)
    return options.get(path) or options.get(str(loc[0]) if loc else "") or path or "input"


def invalid_input(
    exc: ValidationError, options: Mapping[str, str] | None = None
) -> InvalidInputError:
    """A ``ValidationError`` as one line per broken rule, naming the option."""
    options = options or {}
    problems = [(field_name(tuple(e.get("loc", ())), options), rule_of(e)) for e in exc.errors()]
    message = "; ".join(f"{name} {rule}" for name, rule in problems) or "invalid input"
    return InvalidInputError(message, field=problems[0][0] if problems else None)


def validated(model: type[M], options: Mapping[str, str], **values: Any) -> M:
    """``model(**values)``; a broken rule is an ``InvalidInputError`` naming the option
    (``options`` maps a field to its option, e.g. ``{"evidence": "--evidence"}``)."""
    try:
        return model(**values)
    except ValidationError as exc:
        raise invalid_input(exc, options) from None
