"""Configuration variables: the value types section models declare (each refusal states its
rule), reading a model's fields from the variables their ``validation_alias`` names, and a
``ConfigurationError`` naming the variable when a value is refused.

Nothing here reads the process environment: the composition roots hand the variables over
(``worker.settings``), and lower layers only declare their sections' fields and names.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypeVar, Union

from pydantic import AliasChoices, BaseModel, BeforeValidator, SecretStr, ValidationError
from pydantic.fields import FieldInfo

from models.errors import ConfigurationError

M = TypeVar("M", bound=BaseModel)

#: the values a flag variable is on for (anything else, or unset, is off)
TRUE = ("1", "true", "yes")


def positive_int(
    env: Mapping[str, str], name: str, default: int, *, what: str = "an integer"
) -> int:
    """``env[name]`` as a positive integer, ``default`` when unset or empty."""
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"{name} must be {what}, not {raw!r}") from None
    if value < 1:
        raise ConfigurationError(f"{name} must be positive, not {value}")
    return value


# value types ------------------------------------------------------------------------------------


def _integer(value: Any, rule: str) -> int:
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(rule) from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(rule)
    return value


def _positive(what: str) -> BeforeValidator:
    def check(value: Any) -> int:
        number = _integer(value, f"must be {what}")
        if number < 1:
            raise ValueError("must be positive")
        return number

    return BeforeValidator(check)


def _port(value: Any) -> int:
    rule = "must be a port number (0-65535)"
    number = _integer(value, rule)
    if not 0 <= number <= 65535:
        raise ValueError(rule)
    return number


def _seconds(value: Any) -> float:
    rule = "must be a positive number of seconds"
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError(rule) from None
    if not 0 < number < math.inf:
        raise ValueError(rule)
    return number


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in TRUE


#: a positive integer (``must be an integer`` / ``must be positive``)
PositiveInt = Annotated[int, _positive("an integer")]
#: a positive number of bytes
ByteCount = Annotated[int, _positive("a number of bytes")]
#: a positive whole number of seconds
WholeSeconds = Annotated[float, _positive("an integer")]
#: a TCP port, 0-65535
Port = Annotated[int, BeforeValidator(_port)]
#: a positive, finite number of seconds
Seconds = Annotated[float, BeforeValidator(_seconds)]
#: on for ``1``, ``true`` or ``yes`` (any case), off otherwise
Flag = Annotated[bool, BeforeValidator(_flag)]


# reading sections from variables ---------------------------------------------------------------


def variable_names(field: FieldInfo) -> tuple[str, ...]:
    """The variables a field is read from, in order of preference (its ``validation_alias``)."""
    alias = field.validation_alias
    if isinstance(alias, str):
        return (alias,)
    if isinstance(alias, AliasChoices):
        return tuple(choice for choice in alias.choices if isinstance(choice, str))
    return ()


def section_model(field: FieldInfo) -> type[BaseModel] | None:
    """The model of a field that is a section (a nested model, possibly optional)."""
    annotation = field.annotation
    candidates: tuple[Any, ...] = (annotation,)
    if typing.get_origin(annotation) in (Union, types.UnionType):
        candidates = typing.get_args(annotation)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def read_variables(model: type[BaseModel], variables: Mapping[str, str | None]) -> dict[str, Any]:
    """The raw values of ``model``'s fields (by field name, sections nested) from the variables
    their aliases name; an unset, empty or blank variable leaves its field to its default."""
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        section = section_model(field)
        if section is not None:
            if nested := read_variables(section, variables):
                data[name] = nested
            continue
        for variable in variable_names(field):
            value = (variables.get(variable) or "").strip()
            if value:
                data[name] = value
                break
    return data


def read_section(model: type[M], variables: Mapping[str, str | None]) -> M:
    """``model`` validated from ``variables`` (a refused value: ``ConfigurationError``)."""
    try:
        return model.model_validate(read_variables(model, variables))
    except ValidationError as exc:
        raise configuration_error(model, exc) from None


def _field_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> FieldInfo | None:
    field: FieldInfo | None = None
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return field
        field = next(
            (
                f
                for name, f in current.model_fields.items()
                if part == name or part in variable_names(f)
            ),
            None,
        )
        if field is None:
            return None
        current = section_model(field)
    return field


def _is_secret(field: FieldInfo) -> bool:
    annotation = field.annotation
    return annotation is SecretStr or SecretStr in typing.get_args(annotation)


def configuration_error(model: type[BaseModel], exc: ValidationError) -> ConfigurationError:
    """One line naming the variable, the rule and the refused value (a secret's is not shown)."""
    errors = exc.errors()
    first = errors[0]
    loc = tuple(first["loc"])
    field = _field_at(model, loc)
    names = variable_names(field) if field is not None else ()
    name = " or ".join(names) if names else ".".join(str(part) for part in loc)
    rule = first["msg"].removeprefix("Value error, ")
    shown = (
        ""
        if field is None or _is_secret(field) or first["type"] == "missing"
        else f", not {first['input']!r}"
    )
    text = f"{name} {rule}{shown}" if rule.startswith("must") else f"{name}: {rule}{shown}"
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more refused value{'s' if len(errors) > 2 else ''})"
    return ConfigurationError(text, field=names[0] if names else None)
