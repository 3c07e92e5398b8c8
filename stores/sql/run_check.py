"""Verification of everything a replay, a reconciliation or a retry reads of a run, beyond its
chain: payloads held in the artifact store, the artifacts events point to, the rows of the
lookup tables, the freeze records and the external anchor.

The chain proves the events. Each other thing is checked against them: a payload and an
artifact must hash to the digest a chained event names, a lookup row must be what the chained
event that recorded it says (``models.verification``), and the latest anchor's head must still
be in the chain at its sequence (``models.anchor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import operator
import typing
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import inspect, select

from models import ExecutionEventType
from models.anchor import Anchor, check_head
from models.canonical import canonical_hash
from models.chain import ChainRow, ChainVerification, VerificationProblem, verify_chain
from models.digest import is_digest, sha256_digest
from models.errors import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    IntegrityError,
    NotFoundError,
    RunNotFoundError,
    StoreError,
)
from models.verification import (
    ChainedEvents,
    ExpectedRow,
    ProjectionRule,
    compare_row,
    expected_rows,
    rows_as_expected,
    with_problems,
)
from runtime.evidence_refs import REFERENCING, refs_in
from runtime.ports import ArtifactStore
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.chain_read import fetch_lookup_rows, json_value
from stores.sql.database import Database, utc

__all__ = ["PROJECTION_RULES", "check_headless", "check_run", "lookup_read"]

E = ExecutionEventType
CAS_PREFIX = "cas:"
_DIGEST_LENGTH = len("sha256:") + 64
_CONCURRENCY = 16


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

_PARSED_TYPES = frozenset(t for rule in PROJECTION_RULES for t in rule.event_types) | frozenset(
    str(t) for t in REFERENCING
)


@dataclass
class _Found:
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


#: a run's lookup rows: by table, by key, the values of the rule's ``compared`` columns (the
#: record parsed)
LookupRows = dict[str, dict[str, tuple[Any, ...]]]


@contextlib.asynccontextmanager
async def lookup_read(db: Database, run_id: str) -> AsyncIterator[asyncio.Future[LookupRows]]:
    """The read of the run's lookup rows, under way on a connection of its own while the
    caller reads and hashes the chain (``check_run`` awaits it); ended when the body ends."""
    task = asyncio.ensure_future(_lookup_rows(db, run_id))
    try:
        yield task
    finally:
        task.cancel()  # nothing when it is done
        await asyncio.gather(task, return_exceptions=True)


async def check_run(
    db: Database,
    artifacts: ArtifactStore | None,
    anchors: AnchorLog | None,
    run_id: str,
    events: ChainedEvents,
    chain: ChainVerification,
    *,
    lookup: asyncio.Future[LookupRows] | None = None,
) -> ChainVerification:
    """``chain`` (the verification of ``events``) with every problem found beyond the chain;
    ``lookup``: the read of its lookup rows (``lookup_read``) if already under way."""
    if lookup is None:
        async with lookup_read(db, run_id) as started:
            return await check_run(db, artifacts, anchors, run_id, events, chain, lookup=started)
    found = _Found()
    payloads = await _payloads(artifacts, events, found)
    parsed, refs = _parsed_events(events, payloads)
    await _check_artifacts(artifacts, refs, found)
    tables = await lookup
    unread = set(events.sequences).difference(payloads)
    _check_projections(tables, parsed, unread, found)
    await _check_heads(db, anchors, run_id, events.hashes, found)
    await _check_raw_rows(
        db, run_id, dict(zip(events.sequences, events.payload_hashes, strict=True)), found
    )
    return with_problems(chain, found.problems, found.checked)


def _parsed_events(
    events: ChainedEvents, payloads: Mapping[int, bytes | memoryview]
) -> tuple[list[tuple[int, str, str, str, Any]], dict[str, int]]:
    """``(sequence, event_id, type, payload_hash, payload JSON)`` of each event whose payload
    the checks read (lookup records, artifact references), each parsed once; and each artifact
    digest those payloads point to, with the first sequence that does."""
    refs: dict[str, int] = {}
    parsed: list[tuple[int, str, str, str, Any]] = []
    columns = zip(
        events.sequences, events.event_ids, events.types, events.payload_hashes, strict=True
    )
    for sequence, event_id, type_, payload_hash in itertools.compress(
        columns, map(_PARSED_TYPES.__contains__, events.types)
    ):
        data = payloads.get(sequence)
        if data is None:
            continue
        try:
            payload = json_value(data)
        except ValueError:
            continue
        parsed.append((sequence, event_id, type_, payload_hash, payload))
        if type_ in _REFERENCING_TYPES:
            for ref in refs_in(E(type_), payload):
                if is_digest(ref) and len(ref) == _DIGEST_LENGTH:
                    refs.setdefault(ref, sequence)
    return parsed, refs


async def _keeps_raw_payloads(db: Database) -> bool:
    """Whether the schema has ``raw_payloads`` (not before migration 0003, nor after a
    downgrade: a database opened without migrating is verified on what it has)."""
    async with db.read() as conn:
        return bool(await conn.run_sync(lambda c: inspect(c).has_table("raw_payloads")))


async def _check_raw_rows(
    db: Database, run_id: str, sanitized: Mapping[int, str], found: _Found
) -> None:
    """Each event's raw-payload row (rule 17) must belong to a chained event with the
    sanitized hash it names, and hold its encrypted raw form unless a request destroyed it:
    a raw row without ciphertext that nobody destroyed is raw evidence lost. The content is
    not decrypted here (that is an audited read with the KEK)."""
    if not await _keeps_raw_payloads(db):
        return
    r = schema.raw_payloads.c
    query = select(
        r.sequence,
        r.raw_hash,
        r.sanitized_hash,
        r.key_id,
        r.ciphertext_ref,
        r.destroyed_at,
        r.ciphertext.is_not(None).label("inline"),
    ).where(r.run_id == run_id, r.sequence.is_not(None))
    async with db.read() as conn:
        raw_rows = (await conn.execute(query)).all()
    for row in raw_rows:
        found.checked["raw_payloads"] += 1
        what = f"raw payload of sequence {row.sequence}"
        if sanitized.get(row.sequence) != row.sanitized_hash:
            found.add(
                row.sequence,
                "raw_payloads",
                f"{what} names sanitized hash {row.sanitized_hash}, not the chained event's",
            )
        elif (
            row.raw_hash != row.sanitized_hash
            and row.destroyed_at is None
            and (row.key_id is None or not (row.inline or row.ciphertext_ref))
        ):
            found.add(
                row.sequence,
                "raw_payloads",
                f"{what} has no encrypted raw content and was destroyed by no request "
                "(raw evidence lost)",
            )


_REFERENCING_TYPES = frozenset(str(t) for t in REFERENCING)


async def _payloads(
    artifacts: ArtifactStore | None, events: ChainedEvents, found: _Found
) -> dict[int, bytes | memoryview]:
    """Every payload, read back and checked: inline ones against their (chained) payload hash,
    artifact-stored ones from the store."""
    in_store = list(map(str.startswith, events.payload_refs, itertools.repeat(CAS_PREFIX)))
    local = list(map(operator.not_, in_store))
    sequences = list(itertools.compress(events.sequences, local))
    inline = list(itertools.compress(events.payloads, local))
    out: dict[int, bytes | memoryview]
    if None in inline:
        out = {}
        for sequence, payload in zip(sequences, inline, strict=True):
            if payload is None:
                found.add(sequence, "payload", f"payload of sequence {sequence} is missing")
            else:
                out[sequence] = payload
    else:
        # inline payloads the chain check has already hashed (a mismatch breaks it there)
        out = dict(zip(sequences, typing.cast(list[bytes | memoryview], inline), strict=True))
    stored = list(
        itertools.compress(
            zip(events.sequences, events.payload_refs, events.payload_hashes, strict=True),
            in_store,
        )
    )
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def read(sequence: int, payload_ref: str, payload_hash: str) -> None:
        digest = payload_ref[len(CAS_PREFIX) :]
        what = f"the payload of sequence {sequence}"
        if artifacts is None:
            found.add(sequence, "payload", f"{what} cannot be read: no artifact store")
            return
        async with semaphore:
            try:
                data = await artifacts.get(digest)
            except ArtifactNotFoundError:
                found.add(sequence, "payload", f"artifact {digest} missing ({what})")
                return
            except ArtifactIntegrityError:
                found.add(sequence, "payload", f"artifact {digest} corrupted ({what})")
                return
            except (IntegrityError, NotFoundError, StoreError) as exc:
                found.add(sequence, "payload", f"artifact {digest} unreadable ({exc})")
                return
        if digest != payload_hash or sha256_digest(data) != payload_hash:
            found.add(
                sequence,
                "payload",
                f"artifact {digest} does not hold the payload the chained event hashed "
                f"({payload_hash})",
            )
            return
        found.checked["payloads"] += 1
        out[sequence] = data

    await asyncio.gather(*(read(*event) for event in stored))
    found.checked["payloads"] += len(in_store) - len(stored)
    return out


async def _check_artifacts(
    artifacts: ArtifactStore | None, refs: Mapping[str, int], found: _Found
) -> None:
    """Every artifact a chained payload points to is read back and hashed (``get`` does)."""
    if artifacts is None or not refs:
        return
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def read(digest: str, sequence: int) -> None:
        async with semaphore:
            try:
                await artifacts.get(digest)
            except ArtifactNotFoundError:
                found.add(sequence, "artifact", f"artifact {digest} missing")
                return
            except ArtifactIntegrityError:
                found.add(
                    sequence,
                    "artifact",
                    f"artifact {digest} corrupted: it no longer hashes to its digest",
                )
                return
            except (IntegrityError, NotFoundError, StoreError) as exc:
                found.add(sequence, "artifact", f"artifact {digest} unreadable ({exc})")
                return
        found.checked["artifacts"] += 1

    await asyncio.gather(*(read(d, s) for d, s in refs.items()))


async def _lookup_rows(db: Database, run_id: str) -> LookupRows:
    """The run's rows of each lookup table by key, their records parsed."""
    columns = {rule.table: (rule.key_column, *rule.compared) for rule in PROJECTION_RULES}
    async with db.read() as conn:
        tables = await fetch_lookup_rows(conn, columns, run_id)
    return {
        table: {str(row[0]): row[1:] for row in rows}  # key -> the compared values
        for table, rows in tables.items()
    }


def _check_projections(
    tables: LookupRows,
    events: list[tuple[int, str, str, str, Any]],
    unread: set[int],
    found: _Found,
) -> None:
    """Each lookup row (``tables``: by table, by key; consumed) against the event that
    recorded it. A row of an event whose payload could not be read is not called an orphan:
    that payload's problem is already named."""
    by_type: dict[str, list[tuple[int, str, str, str, Any]]] = {}
    for event in events:  # each rule reads only the events of its types
        by_type.setdefault(event[2], []).append(event)
    for rule in PROJECTION_RULES:
        stored = tables[rule.table]
        expected = expected_rows(rule, _of_types(by_type, rule.event_types))
        rows = list(map(stored.pop, expected, itertools.repeat(None)))
        # every row as expected (one comparison of the table's rows), or each one named
        if rows_as_expected(expected.values(), rows):
            found.checked["projections"] += len(rows)
        else:
            _compare_rows(rule, expected, rows, found)
        at = rule.compared.index("sequence")
        for key, row in stored.items():
            if row[at] in unread:
                continue
            found.add(
                row[at],
                rule.table,
                f"{rule.label} {key} in {rule.table} is not recorded by any chained event",
            )


def _compare_rows(
    rule: ProjectionRule,
    expected: Mapping[str, ExpectedRow],
    rows: Sequence[tuple[Any, ...] | None],
    found: _Found,
) -> None:
    """What differs between each expected row and the stored one at the same place (None:
    missing), named row by row."""
    for (key, want), row in zip(expected.items(), rows, strict=True):
        if row is None:
            found.add(
                want.sequence,
                rule.table,
                f"{rule.label} {key} recorded by the chained event at sequence "
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


async def _check_heads(
    db: Database, anchors: AnchorLog | None, run_id: str, hashes: Sequence[str], found: _Found
) -> None:
    """The run's latest external anchor and its freeze records name heads the chain must still
    hold; a truncated, re-chained or rewritten run does not."""
    f = schema.evidence_freezes.c
    try:
        async with db.read() as conn:
            freezes = (
                await conn.execute(
                    select(
                        f.freeze_id, f.chain_head_sequence, f.chain_head_hash, f.created_at
                    ).where(f.run_id == run_id)
                )
            ).all()
    except StoreError:
        # a database still at migration 0001 has no freeze records to check against (the
        # anchor below does not depend on the database)
        freezes = []
    for freeze in freezes:
        anchor = Anchor(
            run_id=run_id,
            sequence=freeze.chain_head_sequence,
            head=freeze.chain_head_hash,
            at=utc(freeze.created_at),
        )
        problem = check_head(anchor, hashes, what=f"freeze {freeze.freeze_id}")
        if problem is not None:
            found.problems.append(problem)
    if anchors is None:
        return
    entry = await anchors.latest(run_id)
    if entry is None:
        return
    found.checked["anchors"] += 1
    problem = check_head(entry.anchor, hashes)
    if problem is not None:
        found.problems.append(problem)


async def check_headless(
    anchors: AnchorLog | None, run_id: str, rows: list[ChainRow]
) -> ChainVerification:
    """A run without its header: not found, unless its events or an anchor say it was
    recorded (a deleted header or a deleted run is then broken, not unknown)."""
    entry = await anchors.latest(run_id) if anchors is not None else None
    if entry is None and not rows:
        raise RunNotFoundError(f"run not found: {run_id!r}")
    chain = verify_chain(run_id, rows)
    if entry is not None:
        problem = check_head(entry.anchor, [row.hash for row in rows])
        what = "its events are gone" if not rows else "its header is gone"
        message = f"run header deleted ({what})" + (
            f"; {problem.message}" if problem is not None else ""
        )
        at = entry.anchor.sequence
    else:
        message, at = f"run header deleted ({len(rows)} events remain)", 1
    found = VerificationProblem(sequence=at, kind="anchor", message=message)
    return with_problems(
        chain.model_copy(update={"intact": True}), [found], {"anchors": int(entry is not None)}
    )
