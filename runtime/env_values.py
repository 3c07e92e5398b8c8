"""Reading numbers from configuration variables, with an error that names the variable."""

from __future__ import annotations

from collections.abc import Mapping

from models.errors import ConfigurationError


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
