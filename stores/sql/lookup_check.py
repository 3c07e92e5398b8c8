"""The lookup tables' side of the full check (``stores.sql.run_check``): how each table derives
from the chained events (``PROJECTION_RULES``), the read of a run's rows and their check.

Each lookup row must be what the chained event that recorded it says (``models.verification``):
a table's rows are read as the compared columns only and compared column by column at once;
a table that differs anywhere is compared row by row, which names each difference.
"""

from __future__ import annotations

import itertools
import operator
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from models import ExecutionEventType
from models.canonical import canonical_hash
from models.chain import VerificationProblem
from models.verification import (
    ExpectedRow,
    ProjectionRule,
    compare_row,
    expected_rows,
    rows_as_expected,
)
from stores.sql.chain_read import fetch_lookup_rows

__all__ = ["PROJECTION_RULES", "Found", "LookupRows", "check_projections", "lookup_rows"]

E = ExecutionEventType


def _rule(
    table: str,
    label: str,
    types: set[E],
    key: str,
    natural: str | None,
    signature: set[str],
    columns: tuple[str, ...],
    mutable: bool = False,
) -> ProjectionRule:
    return ProjectionRule(
        table=table,
        label=label,
        event_types=frozenset(str(t) for t in types),
        key_column=key,
        natural_key=natural,
        signature=frozenset(signature),
        columns=columns,
        mutable=mutable,
    )


#: the lookup tables and how each derives from the chained events (see stores/sql/projections.py,
#: which writes them: the same key, sequence, content hash, columns and record)
PROJECTION_RULES: tuple[ProjectionRule, ...] = (
    _rule(
        "tool_fixtures",
        "fixture",
        {E.TOOL_CALL},
        "fixture_id",
        None,
        {"tool_call_id", "capability_id", "request_hash", "outcome", "sanitized_response"},
        ("tool_call_id", "capability_id", "request_hash", "outcome"),
    ),
    _rule(
        "prompt_artifacts",
        "prompt artifact",
        {E.PROMPT_COMPILED},
        "artifact_id",
        "artifact_id",
        {"artifact_id", "template_version", "compiled_hash", "content_ref"},
        ("template_version", "compiled_hash"),
    ),
    _rule(
        "context_snapshots",
        "context snapshot",
        {E.CONTEXT_SNAPSHOT},
        "snapshot_id",
        "snapshot_id",
        {"snapshot_id", "tool_catalog_hash", "state_hash", "content_hash"},
        (),
    ),
    _rule(
        "retrieval_fixtures",
        "retrieval fixture",
        {E.RETRIEVAL},
        "retrieval_id",
        None,
        {"query_hash", "retriever_version", "evidence"},
        ("query_hash", "retriever_version"),
    ),
    _rule(
        "policy_decisions",
        "policy decision",
        {E.POLICY_DECISION},
        "decision_id",
        None,
        {"policy_id", "policy_version", "input_hash", "decision"},
        ("policy_id", "policy_version", "decision"),
    ),
    _rule(
        "approvals",
        "approval",
        {E.APPROVAL},
        "approval_id",
        "approval_id",
        {"approval_id", "approver", "action_hash", "approved_at"},
        ("action_hash",),
    ),
    _rule(
        "side_effects",
        "side effect",
        {E.SIDE_EFFECT},
        "side_effect_id",
        "side_effect_id",
        {"side_effect_id", "idempotency_key", "action_hash", "status", "capability_id"},
        ("status", "capability_id", "idempotency_key"),
        mutable=True,
    ),
    _rule(
        "checkpoints",
        "checkpoint",
        {E.CHECKPOINT},
        "checkpoint_id",
        None,
        {"run_id", "step_id", "sequence", "state_ref", "state_hash"},
        ("sequence",),
    ),
)


@dataclass
class Found:
    """The problems found beyond the chain and how many of each thing were checked."""

    problems: list[VerificationProblem] = field(default_factory=list)
    checked: dict[str, int] = field(
        default_factory=lambda: {
            "payloads": 0,
            "artifacts": 0,
            "projections": 0,
            "anchors": 0,
            "raw_payloads": 0,
        }
    )

    def add(self, sequence: int | None, kind: str, message: str) -> None:
        self.problems.append(VerificationProblem(sequence=sequence, kind=kind, message=message))


#: a run's lookup rows: by table, the rule's key column then each of its ``compared`` ones,
#: each as its rows' values (in one order; the record parsed)
LookupRows = dict[str, list[Sequence[Any]]]


async def lookup_rows(conn: AsyncConnection, run_id: str) -> LookupRows:
    """The run's rows of each lookup table, their records parsed, read on ``conn`` (the
    snapshot the run's chain is read in)."""
    columns = {rule.table: (rule.key_column, *rule.compared) for rule in PROJECTION_RULES}
    return await fetch_lookup_rows(conn, columns, run_id)


def check_projections(
    tables: LookupRows,
    events: list[tuple[int, str, str, str, Any]],
    unread: set[int],
    found: Found,
) -> None:
    """Each lookup row against the event that recorded it. A row of an event whose payload
    could not be read is not called an orphan: that payload's problem is already named."""
    by_type: dict[str, list[tuple[int, str, str, str, Any]]] = {}
    for event in events:  # each rule reads only the events of its types
        by_type.setdefault(event[2], []).append(event)
    for rule in PROJECTION_RULES:
        keys, *columns = tables[rule.table]
        expected = expected_rows(rule, _of_types(by_type, rule.event_types))
        # each stored row's place by key (a key stored twice: its last row), taken by the
        # expected rows: the places left are orphans
        places = dict(zip(map(str, keys), itertools.count()))
        at = list(map(places.pop, expected, itertools.repeat(None)))
        wanted = list(expected.values())
        # every row as expected (one comparison per column), or each one named
        if not any(map(operator.is_, at, itertools.repeat(None))) and rows_as_expected(
            rule,
            wanted,
            [list(map(column.__getitem__, typing.cast(list[int], at))) for column in columns],
        ):
            found.checked["projections"] += len(at)
        else:
            _compare_rows(
                rule, wanted, [None if i is None else _row(columns, i) for i in at], found
            )
        sequences = columns[rule.compared.index("sequence")]
        for key, place in places.items():
            if sequences[place] in unread:
                continue
            found.add(
                sequences[place],
                rule.table,
                f"{rule.label} {key} in {rule.table} is not recorded by any chained event",
            )


def _row(columns: Sequence[Sequence[Any]], place: int) -> tuple[Any, ...]:
    """The values of the stored row at ``place``."""
    return tuple(column[place] for column in columns)


def _compare_rows(
    rule: ProjectionRule,
    expected: Sequence[ExpectedRow],
    rows: Sequence[tuple[Any, ...] | None],
    found: Found,
) -> None:
    """What differs between each expected row and the stored one (its ``rule.compared``
    values; None: missing), named row by row."""
    for want, row in zip(expected, rows, strict=True):
        if row is None:
            found.add(
                want.sequence,
                rule.table,
                f"{rule.label} {want.key} recorded by the chained event at sequence "
                f"{want.sequence} is missing from {rule.table}",
            )
            continue
        actual = dict(zip(rule.compared, row, strict=True))
        problem = compare_row(rule, want, actual, _same_record)
        if problem is not None:
            found.add(want.sequence, rule.table, problem)
        found.checked["projections"] += 1


def _of_types(
    by_type: Mapping[str, list[tuple[int, str, str, str, Any]]], types: frozenset[str]
) -> list[tuple[int, str, str, str, Any]]:
    """The events of ``types``, in sequence order."""
    lists = [by_type[t] for t in types if t in by_type]
    if len(lists) == 1:
        return lists[0]
    return sorted((e for events in lists for e in events), key=lambda e: e[0])


def _same_record(stored: Mapping[str, Any], chained: Mapping[str, Any]) -> bool:
    try:
        return canonical_hash(dict(stored)) == canonical_hash(dict(chained))
    except ValueError:
        return False
