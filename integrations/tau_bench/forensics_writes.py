"""How two writes are "the same" (canonical arguments, honouring what the recorded data showed),
and the pairing of a run's writes with its expected ones (``integrations.tau_bench.forensics``):

- a write whose output starts with ``Error:`` changed nothing, so it is not a write at all;
- arguments are compared as canonical JSON (RFC 8785: key order and ``1`` vs ``1.0`` do not
  matter), after dropping object properties the tool's schema does not declare (the tool
  ignores them: an agent that also sends a flight's ``origin`` sends the same request);
- an ``*_ids`` list is a multiset (order carries no meaning, duplicates do), and a
  ``new_<x>_ids`` list is paired position by position with its ``<x>_ids`` list, so the pairs
  are sorted together; a pair that maps an id onto itself changes nothing and is dropped;
- arguments are copied before anything is compared or executed: tools have been seen to keep
  a caller's list inside their database and mutate it later (aliasing).
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from integrations.tau_bench.forensics_records import ToolCallFact, WriteDiff
from models.canonical import canonical_hash, normalize_json


def _schema_properties(schema: Any) -> dict[str, Any] | None:
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return schema["properties"]
    return None


def _prune(value: Any, schema: Any) -> Any:
    """Drop object properties the schema does not declare; recurse into declared ones."""
    props = _schema_properties(schema)
    if isinstance(value, dict) and props is not None:
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, list) and isinstance(schema, dict) and "items" in schema:
        return [_prune(v, schema["items"]) for v in value]
    return value


def _sort_key(value: Any) -> str:
    return canonical_hash(value)


def normalize_arguments(arguments: Any, schema: Any = None) -> Any:
    """The canonical form two equivalent write requests share (see the module docstring)."""
    if not isinstance(arguments, dict):
        return normalize_json(copy.deepcopy(arguments))
    args = normalize_json(_prune(copy.deepcopy(arguments), schema))
    for key in list(args):
        new_key = f"new_{key}"
        if key.endswith("_ids") and isinstance(args.get(new_key), list):
            old, new = args[key], args[new_key]
            if isinstance(old, list) and len(old) == len(new):
                pairs = sorted(
                    ((o, n) for o, n in zip(old, new, strict=True) if o != n), key=_sort_key
                )
                args[key], args[new_key] = [p[0] for p in pairs], [p[1] for p in pairs]
        elif key.endswith("_ids") and isinstance(args[key], list) and not key.startswith("new_"):
            args[key] = sorted(args[key], key=_sort_key)
    return args


def _target(arguments: Any, schema: Any) -> Any:
    """The entity a write acts on: its first required ``*_id`` argument."""
    if not isinstance(arguments, dict):
        return None
    required = schema.get("required", []) if isinstance(schema, dict) else []
    for key in [*required, *sorted(arguments)]:
        if key.endswith("_id") and key in arguments:
            return (key, arguments[key])
    return None


def _differing_args(expected: Any, actual: Any) -> tuple[str, ...]:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return ("*",)
    keys = sorted(set(expected) | set(actual))
    return tuple(k for k in keys if expected.get(k) != actual.get(k))


def pair_leftovers(
    missing: list[tuple[str, Any, Any]], extra: list[tuple[str, Any, ToolCallFact]], schemas: dict
) -> tuple[list[WriteDiff], list[WriteDiff], list[WriteDiff]]:
    """Pair an unmatched expected write with an unmatched actual one of the same tool, same
    target first, then any target (reported as a wrong target)."""
    differing: list[WriteDiff] = []
    for same_target in (True, False):
        for m in list(missing):
            name, norm_expected, _ = m
            schema = schemas.get(name)
            for e in extra:
                if e[0] != name:
                    continue
                target_equal = _target(norm_expected, schema) == _target(e[1], schema)
                if target_equal != same_target:
                    continue
                args = _differing_args(norm_expected, e[1]) if same_target else ("<target>",)
                differing.append(
                    WriteDiff(
                        kind="differing",
                        name=name,
                        expected=norm_expected,
                        actual=e[1],
                        arguments=args,
                        message_index=e[2].assistant_index,
                    )
                )
                missing.remove(m)
                extra.remove(e)
                break
    missing_diffs = [WriteDiff(kind="missing", name=n, expected=a) for n, a, _ in missing]
    extra_diffs = [
        WriteDiff(kind="extra", name=n, actual=a, message_index=c.assistant_index)
        for n, a, c in extra
    ]
    return missing_diffs, extra_diffs, differing


def unmatched_writes(expected: list[Any], actual: list[Any]) -> tuple[list[Any], list[Any]]:
    """The expected and the actual writes (name, normalised arguments, …) left unmatched
    after pairing equal ones (as multisets)."""
    key = lambda item: (item[0], canonical_hash(item[1]))  # noqa: E731
    unmatched_actual = Counter(key(a) for a in actual)
    left_expected = []
    for e in expected:
        if unmatched_actual[key(e)] > 0:
            unmatched_actual[key(e)] -= 1
        else:
            left_expected.append(e)
    left_actual = []
    for a in actual:
        if unmatched_actual[key(a)] > 0:
            unmatched_actual[key(a)] -= 1
            left_actual.append(a)
    return left_expected, left_actual
