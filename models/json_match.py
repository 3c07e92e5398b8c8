"""JSON paths and JSON equality shared by regression assertions and expectations (pure)."""

from __future__ import annotations

from typing import Any

#: what ``resolve`` answers for a path that does not exist (distinct from JSON ``null``)
MISSING: Any = object()


def resolve(value: Any, path: str) -> Any:
    """The value at dotted ``path`` in ``value`` (objects only), or ``MISSING``."""
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return value


def same(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's ``==``, ``true`` is not ``1`` (at any depth)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b
