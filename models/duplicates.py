"""Duplicate writes within one run: the same action applied twice.

Two kinds, both critical (an agent that books the same trip twice charges the customer twice):

- ``same_action``: two writes applied (CONFIRMED, or RECONCILED as applied) with the same
  capability and the same action hash — the canonical request the ledger hashes;
- ``same_key_arguments`` (a near duplicate): two successful calls of the same write tool whose
  *key arguments* are equal while the rest differs. The key arguments are what names the
  thing acted on: every argument whose name is an id (``*_id``, ``*_ids``, ``id``) and every
  structured argument (a list or an object: the flights, items or passengers of the write);
  scalars such as an amount, a reason or a count are not. A write with no key argument is
  never a near duplicate.

A write that failed (its answer starts with ``Error:``) changed nothing and is never counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from models.base import Record
from models.canonical import canonical_hash
from models.enums import SideEffectStatus
from models.evidence import SideEffectRecord

__all__ = ["DuplicateWrite", "duplicate_calls", "duplicate_side_effects", "key_arguments"]

SAME_ACTION = "same_action"
SAME_KEY_ARGUMENTS = "same_key_arguments"


class DuplicateWrite(Record):
    """A group of writes that applied one action more than once (severity: critical)."""

    kind: str
    capability_id: str
    #: the shared action hash (``same_action``), or the hash of the shared key arguments
    action_hash: str
    side_effect_ids: tuple[str, ...] = ()
    #: 0-based message indexes of the calls (imported conversations), when known
    message_indexes: tuple[int, ...] = ()
    severity: str = "critical"


def _applied(record: SideEffectRecord) -> bool:
    return record.status is SideEffectStatus.CONFIRMED or (
        record.status is SideEffectStatus.RECONCILED and record.reconciled_applied is True
    )


def duplicate_side_effects(records: Sequence[SideEffectRecord]) -> list[DuplicateWrite]:
    """Side effects of one run applied twice or more with the same capability and action
    hash, in the order given (the ledger's order)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for record in records:
        if _applied(record):
            key = (record.capability_id, record.action_hash)
            groups.setdefault(key, []).append(record.side_effect_id)
    return [
        DuplicateWrite(
            kind=SAME_ACTION,
            capability_id=capability,
            action_hash=action_hash,
            side_effect_ids=tuple(ids),
        )
        for (capability, action_hash), ids in groups.items()
        if len(ids) > 1
    ]


def _is_key(name: str, value: Any) -> bool:
    lowered = name.lower()
    is_id = lowered == "id" or lowered.endswith(("_id", "_ids"))
    return is_id or isinstance(value, list | dict)


def key_arguments(arguments: Any) -> dict[str, Any]:
    """The arguments that name what a write acts on (see the module docstring)."""
    if not isinstance(arguments, dict):
        return {}
    return {k: v for k, v in arguments.items() if _is_key(k, v)}


def duplicate_calls(calls: Sequence[tuple[str, Any, int]]) -> list[DuplicateWrite]:
    """Successful write calls ``(tool, arguments, message index)`` of one run, in order, that
    repeat an action: the same canonical arguments (``same_action``) or, failing that, the same
    key arguments (``same_key_arguments``)."""
    exact: dict[tuple[str, str], list[int]] = {}
    near: dict[tuple[str, str], list[int]] = {}
    for name, arguments, index in calls:
        exact.setdefault((name, canonical_hash([name, arguments])), []).append(index)
        keys = key_arguments(arguments)
        if keys:
            near.setdefault((name, canonical_hash([name, keys])), []).append(index)
    found = [
        DuplicateWrite(kind=SAME_ACTION, capability_id=n, action_hash=h, message_indexes=tuple(i))
        for (n, h), i in exact.items()
        if len(i) > 1
    ]
    covered = {i for d in found for i in d.message_indexes}
    for (name, digest), indexes in near.items():
        if len(indexes) > 1 and not set(indexes) <= covered:
            found.append(
                DuplicateWrite(
                    kind=SAME_KEY_ARGUMENTS,
                    capability_id=name,
                    action_hash=digest,
                    message_indexes=tuple(indexes),
                )
            )
    return found
