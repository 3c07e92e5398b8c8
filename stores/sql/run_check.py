"""Verification of everything a replay, a reconciliation or a retry reads of a run, beyond its
chain: payloads held in the artifact store, the artifacts events point to, the rows of the
lookup tables, the freeze records and the external anchor.

The chain proves the events. Each other thing is checked against them: a payload and an
artifact must hash to the digest a chained event names, a lookup row must be what the chained
event that recorded it says (``models.verification``, ``stores.sql.lookup_check``), and the latest anchor's head must still
be in the chain at its sequence (``models.anchor``). The rows are read in the snapshot the
chain is read in (``Database.snapshot``): rows and chain of a run being written are of one
moment, never rows newer than the chain read (which looked like orphans: a false alarm).
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import inspect, select
from sqlalchemy.ext.asyncio import AsyncConnection

from models import ExecutionEventType
from models.anchor import Anchor, RunAnchor, check_head
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
    header_finish_problem,
    joined_events,
    with_problems,
)
from runtime.evidence_refs import REFERENCING, refs_in
from runtime.ports import ArtifactStore
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.chain_read import json_value, json_values
from stores.sql.database import utc
from stores.sql.governance import governance_rows
from stores.sql.lookup_check import (
    PROJECTION_RULES,
    Found,
    LookupRows,
    check_projections,
    lookup_rows,
)
from stores.sql.raw_check import RawRows, check_raw_rows, read_raw_rows

__all__ = [
    "PROJECTION_RULES",
    "EventsRead",
    "RunRows",
    "check_headless",
    "check_run",
    "latest_anchor",
    "run_rows",
]

E = ExecutionEventType
CAS_PREFIX = "cas:"
_DIGEST_LENGTH = len("sha256:") + 64
_CONCURRENCY = 16
#: reads started at a time (at most ``_CONCURRENCY`` of them in flight): between two such
#: chunks the loop takes a turn, so a long run's check lets heartbeats and other tasks run
#: (50,000 reads gathered at once held a worker's loop for seconds: a small artifact's read
#: completes without suspending)
_CHUNK = 256
#: runs with more events than this have their whole-run checks run off the event loop
_OFF_LOOP_EVENTS = 4096
_T = typing.TypeVar("_T")


#: the events that end a run: the run header's status and outcome are checked against them
_TERMINAL_TYPES = frozenset({str(E.RUN_COMPLETED), str(E.RUN_FAILED)})
_PARSED_TYPES = (
    frozenset(t for rule in PROJECTION_RULES for t in rule.event_types)
    | frozenset(str(t) for t in REFERENCING)
    | _TERMINAL_TYPES
)


class RunRows(NamedTuple):
    """What the checks beyond the chain read of the run besides its events."""

    lookup: LookupRows
    #: its raw-payload rows and their chained deletions (``_raw_rows``)
    raw: RawRows
    #: its freeze records (``_freezes``)
    freezes: Sequence[Any]
    #: what the anchor log says of it (None: no anchor log)
    anchor: RunAnchor | None
    #: its header as stored (the JSON record; None when the header is gone)
    header: Any = None
    #: its governance rows (``stores.sql.governance.GovernanceRows``; None: not read)
    governance: Any = None


async def run_rows(
    conn: AsyncConnection, anchor: RunAnchor | None, run_id: str
) -> asyncio.Future[RunRows]:
    """The read of the run's lookup rows, raw-payload rows and freeze records on ``conn`` (the
    snapshot its chain is read in: ``Database.snapshot``), with ``anchor``, its latest
    external anchor (read before the snapshot began: an anchor names a head already
    committed, so an honest one is never newer than the chain read). On SQLite the lookup
    rows' read is still under way when this returns: queued on the connection's thread
    beside the chain's reads, it is computed while the loop hashes the chain (the caller
    awaits it, or cancels it). PostgreSQL runs one statement at a time on a connection: read
    now."""
    raw = await _raw_rows(conn, run_id)
    freezes = await _freezes(conn, run_id)
    header = (
        await conn.execute(select(schema.runs.c.record).where(schema.runs.c.run_id == run_id))
    ).scalar()
    governance = await governance_rows(conn, run_id)

    async def read() -> RunRows:
        return RunRows(await lookup_rows(conn, run_id), raw, freezes, anchor, header, governance)

    if conn.dialect.name == "sqlite":
        return asyncio.ensure_future(read())
    done: asyncio.Future[RunRows] = asyncio.get_running_loop().create_future()
    done.set_result(await read())
    return done


async def latest_anchor(anchors: AnchorLog | None, run_id: str) -> RunAnchor | None:
    return None if anchors is None else await anchors.run_anchor(run_id)


class EventsRead:
    """The events of an intact chain as a store verifies it, chunk by chunk (``add``: the
    ``on_events`` of ``stores.sql.chain_read.verify_intact_chain``), and the inline payloads the
    checks read parsed as each chunk comes, while the store reads the next. They are the run's
    only if its whole chain verifies."""

    def __init__(self) -> None:
        self.parts: list[ChainedEvents] = []
        #: ``_parsed_events`` of the inline payloads
        self.parsed: list[tuple[int, str, str, str, Any]] = []

    def add(self, events: ChainedEvents) -> None:
        self.parts.append(events)
        self.parsed += _parsed_events(events, {})

    def events(self) -> ChainedEvents:
        return joined_events(self.parts)


async def check_run(
    artifacts: ArtifactStore | None,
    events: ChainedEvents,
    chain: ChainVerification,
    reading: asyncio.Future[RunRows],
    *,
    parsed: list[tuple[int, str, str, str, Any]] | None = None,
) -> ChainVerification:
    """``chain`` (the verification of ``events``) with every problem found beyond the chain;
    ``reading``: the read of the run's other rows in the same snapshot as ``events``
    (``run_rows``);
    ``parsed``: its inline payloads the checks read, already parsed (``EventsRead``)."""
    run_id = chain.run_id
    found = Found()
    in_store = list(map(str.startswith, events.payload_refs, itertools.repeat(CAS_PREFIX)))
    payloads, from_store = await _payloads(artifacts, events, in_store, found)
    # the whole-run passes below are plain CPU work over every event: a long run's (50,000
    # steps) held the worker's loop for seconds, so for a long run they run in a thread (the
    # loop gets the GIL between its slices: heartbeats go out); ``found`` is touched by one
    # of them at a time, while this waits
    off_loop = len(events.sequences) > _OFF_LOOP_EVENTS
    if parsed is None:
        parsed = await _cpu(off_loop, _parsed_events, events, from_store)
    elif from_store:  # the artifact-stored ones too, in sequence order
        stored = await _cpu(off_loop, _parsed_events, events.selected(in_store), from_store)
        parsed = sorted([*parsed, *stored], key=operator.itemgetter(0))
    await _check_artifacts(artifacts, await _cpu(off_loop, _references, parsed), found)
    rows = await reading

    def check_rows() -> None:
        unread = set(events.sequences).difference(payloads)
        check_projections(rows.lookup, parsed, unread, found)
        _check_heads(rows, run_id, events.hashes, found)
        _check_header(rows.header, parsed, found)
        if rows.governance is not None:
            found.problems += rows.governance.problems()
        sanitized = dict(zip(events.sequences, events.payload_hashes, strict=True))
        check_raw_rows(run_id, rows.raw, sanitized, payloads, found)

    await _cpu(off_loop, check_rows)
    return with_problems(chain, found.problems, found.checked)


async def _cpu(off_loop: bool, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``: in a thread when ``off_loop`` (a long run), else here."""
    return await asyncio.to_thread(fn, *args) if off_loop else fn(*args)


def _check_header(
    header: Any, parsed: Sequence[tuple[int, str, str, str, Any]], found: Found
) -> None:
    """The header's status and outcome (written when the run finished, not chained) must be
    what the run's terminal event says (``header_finish_problem``); the rest of the header is
    chained at genesis (``models.chain.header_genesis``)."""
    if isinstance(header, str):
        header = json_value(header)
    if not isinstance(header, dict):
        return
    ends = [(s, t, p) for s, _, t, _, p in parsed if t in _TERMINAL_TYPES]
    sequence, kind, payload = ends[-1] if ends else (None, None, None)
    problem = header_finish_problem(
        header.get("status"), header.get("outcome"), None if kind is None else (kind, payload)
    )
    if problem is not None:
        found.problems.append(
            VerificationProblem(sequence=sequence, kind="header", message=problem)
        )


def _parsed_events(
    events: ChainedEvents, from_store: Mapping[int, bytes]
) -> list[tuple[int, str, str, str, Any]]:
    """``(sequence, event_id, type, payload_hash, payload JSON)`` of each event whose payload
    the checks read (lookup records, artifact references), in order: its inline payload, or
    the one ``from_store`` (by sequence) when it is held in the artifact store; an event without
    (a payload missing, unreadable or not JSON: named by ``_payloads``) is left out. Column by
    column (no Python frame per event but the parse's)."""
    typed = events.selected(map(_PARSED_TYPES.__contains__, events.types))
    data: Sequence[bytes | memoryview | None] = typed.payloads
    if any(map(str.startswith, typed.payload_refs, itertools.repeat(CAS_PREFIX))):
        data = [
            from_store.get(sequence) if ref.startswith(CAS_PREFIX) else inline
            for sequence, ref, inline in zip(
                typed.sequences, typed.payload_refs, typed.payloads, strict=True
            )
        ]
    read = list(map(operator.is_not, data, itertools.repeat(None)))
    columns = (typed.sequences, typed.event_ids, typed.types, typed.payload_hashes)
    parsed = list(
        zip(
            *(itertools.compress(column, read) for column in columns),
            json_values(list(itertools.compress(data, read)), not_json=_not_json),
            strict=True,
        )
    )
    if any(map(operator.is_, map(operator.itemgetter(4), parsed), itertools.repeat(_NOT_JSON))):
        return [event for event in parsed if event[4] is not _NOT_JSON]
    return parsed


#: what ``_parsed_events`` parses a payload that is not JSON into
_NOT_JSON = object()


def _not_json(_: object) -> object:
    return _NOT_JSON


def _references(parsed: Iterable[tuple[int, str, str, str, Any]]) -> dict[str, int]:
    """Each artifact digest the parsed payloads (in sequence order) point to, with the first
    sequence that does."""
    refs: dict[str, int] = {}
    for sequence, _, type_, _, payload in parsed:
        if type_ in _REFERENCING_TYPES:
            for ref in refs_in(E(type_), payload):
                if is_digest(ref) and len(ref) == _DIGEST_LENGTH:
                    refs.setdefault(ref, sequence)
    return refs


async def _raw_rows(conn: AsyncConnection, run_id: str) -> RawRows:
    """The run's raw-payload rows and their chained deletions (``stores.sql.raw_check``)."""
    return await read_raw_rows(conn, run_id)


async def _has_table(conn: AsyncConnection, table: str) -> bool:
    return bool(await conn.run_sync(lambda c: inspect(c).has_table(table)))


_REFERENCING_TYPES = frozenset(str(t) for t in REFERENCING)


async def _payloads(
    artifacts: ArtifactStore | None,
    events: ChainedEvents,
    in_store: Sequence[bool],
    found: Found,
) -> tuple[dict[int, bytes | memoryview], dict[int, bytes]]:
    """Every payload by sequence, read back and checked: inline ones against their (chained)
    payload hash, artifact-stored ones (``in_store``: which events' are) from the store; and the
    latter alone."""
    local = list(map(operator.not_, in_store))
    sequences = list(itertools.compress(events.sequences, local))
    inline = list(itertools.compress(events.payloads, local))
    out: dict[int, bytes | memoryview]
    if any(map(operator.is_, inline, itertools.repeat(None))):  # (no == of each payload)
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
    from_store: dict[int, bytes] = {}
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
        from_store[sequence] = data

    await _in_chunks(read, stored)
    found.checked["payloads"] += len(in_store) - len(stored)
    out.update(from_store)
    return out, from_store


async def _check_artifacts(
    artifacts: ArtifactStore | None, refs: Mapping[str, int], found: Found
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

    await _in_chunks(read, list(refs.items()))


async def _in_chunks(
    read: Callable[..., Awaitable[None]], items: Sequence[tuple[Any, ...]]
) -> None:
    """``read(*item)`` for every item, ``_CHUNK`` tasks at a time, a loop turn between chunks."""
    for start in range(0, len(items), _CHUNK):
        await asyncio.gather(*(read(*item) for item in items[start : start + _CHUNK]))
        await asyncio.sleep(0)


async def _freezes(conn: AsyncConnection, run_id: str) -> Sequence[Any]:
    """The run's freeze records (none in a database still at migration 0001: the anchor does
    not depend on the database). Asked first, not tried: a failed statement would end the
    snapshot's transaction on PostgreSQL."""
    if not await _has_table(conn, "evidence_freezes"):
        return []
    f = schema.evidence_freezes.c
    return (
        await conn.execute(
            select(f.freeze_id, f.chain_head_sequence, f.chain_head_hash, f.created_at).where(
                f.run_id == run_id
            )
        )
    ).all()


def _check_heads(rows: RunRows, run_id: str, hashes: Sequence[str], found: Found) -> None:
    """The run's latest external anchor and its freeze records name heads the chain must still
    hold; a truncated, re-chained or rewritten run does not."""
    for freeze in rows.freezes:
        anchor = Anchor(
            run_id=run_id,
            sequence=freeze.chain_head_sequence,
            head=freeze.chain_head_hash,
            at=utc(freeze.created_at),
        )
        problem = check_head(anchor, hashes, what=f"freeze {freeze.freeze_id}")
        if problem is not None:
            found.problems.append(problem)
    if rows.anchor is None:
        return
    found.problems.extend(rows.anchor.problems)
    if rows.anchor.entry is None:
        return
    found.checked["anchors"] += 1
    if not rows.anchor.signed:
        found.checked["unsigned_anchors"] = 1
    problem = check_head(rows.anchor.entry.anchor, hashes)
    if problem is not None:
        found.problems.append(problem)


async def check_headless(
    anchors: AnchorLog | None, run_id: str, rows: list[ChainRow]
) -> ChainVerification:
    """A run without its header: not found, unless its events or an anchor say it was
    recorded (a deleted header or a deleted run is then broken, not unknown)."""
    reading = await anchors.run_anchor(run_id) if anchors is not None else None
    entry = None if reading is None else reading.entry
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
        chain.model_copy(update={"intact": True}),
        [found, *(reading.problems if reading is not None else ())],
        {"anchors": int(entry is not None)},
    )
