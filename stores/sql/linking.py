"""Linking a batch of appends onto their runs' heads: the rows to insert, the events appended.

This runs for every appended event, so it does each piece of work once: the link hash from
the fixed template with the instants written in it (``models.chain.link_hash_of``, no
intermediate row object or metadata bytes), the rows as the dicts both writers take, the
record's lookup row JSON from the payload bytes already canonicalized, and the appended
``ExecutionEvent`` without validating again what this module made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table

from models import ExecutionEvent, ExecutionEventType, HashedRecord
from models.canonical import canonicalize
from models.chain import CHAIN_SCHEMA_VERSION, link_hash_of
from models.digest import is_digest
from models.errors import RunNotFoundError, SequenceConflictError
from runtime.ports import NewEvent
from stores.sql import schema
from stores.sql.privacy import event_raw_id
from stores.sql.projections import ProjectedRecord, plain_insert_rows

__all__ = ["AppendRequest", "LinkedBatch", "fast_rows", "link_batch"]


@dataclass(frozen=True)
class AppendRequest:
    run_id: str
    events: list[NewEvent]
    #: (payload_ref, payload_hash, inline bytes, raw_payloads columns or None) per event,
    #: prepared (and the raw payload encrypted) before any lock is taken
    prepared: list[tuple[str, str, bytes | None, dict[str, Any] | None]]
    expected_sequence: int | None
    #: ``raw_payloads`` rows of sanitized artifacts the events reference (raw content sealed),
    #: written in the same transaction when not kept already
    artifact_raws: list[dict[str, Any]] = field(default_factory=list)
    #: ``run_subjects`` rows of people the run learned of (inserted unless there already), in
    #: the same transaction: before any raw content recorded after it is durable
    subjects: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class LinkedBatch:
    """A batch of appends chained onto their runs' heads, ready to insert."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    raw_rows: list[dict[str, Any]] = field(default_factory=list)
    #: the requests' ``artifact_raws`` (inserted unless kept already)
    artifact_raws: list[dict[str, Any]] = field(default_factory=list)
    #: the requests' ``subjects``
    subjects: list[dict[str, Any]] = field(default_factory=list)
    #: the appended events, per request
    results: list[list[ExecutionEvent]] = field(default_factory=list)
    #: the events carrying a record, to project (with the record's canonical JSON when inline)
    projections: list[tuple[NewEvent, HashedRecord, ExecutionEvent, bytes | None]] = field(
        default_factory=list
    )


def link_batch(
    requests: list[AppendRequest], heads: dict[str, tuple[int, str]], recorded_at: datetime
) -> LinkedBatch:
    """The rows of ``requests``, each event linked to the one before it; ``heads`` is moved
    to each run's new head. Refuses a run that does not exist or an expected sequence that
    is not the next one."""
    batch = LinkedBatch()
    for request in requests:
        run_id = request.run_id
        sequence, previous = _head_for(request, heads)
        out = []
        for event, (payload_ref, payload_hash, inline, raw_columns) in zip(
            request.events, request.prepared, strict=True
        ):
            sequence += 1
            event_type = str(event.type)
            link = link_hash_of(
                previous,
                event.event_id,
                event.logical_time,
                payload_ref,
                recorded_at,
                run_id,
                CHAIN_SCHEMA_VERSION,
                sequence,
                event.step_id,
                event_type,
                payload_hash,
            )
            batch.rows.append(
                {
                    "run_id": run_id,
                    "sequence": sequence,
                    "event_id": event.event_id,
                    "step_id": event.step_id,
                    "type": event_type,
                    "payload_ref": payload_ref,
                    "payload_hash": payload_hash,
                    "previous_hash": previous,
                    "hash": link,
                    "logical_time": event.logical_time,
                    "recorded_at": recorded_at,
                    "schema_version": CHAIN_SCHEMA_VERSION,
                    "payload": inline,
                }
            )
            if raw_columns is not None:
                batch.raw_rows.append(
                    {
                        **raw_columns,
                        "raw_id": event_raw_id(run_id, sequence),
                        "sequence": sequence,
                        "created_at": recorded_at,
                    }
                )
            appended = appended_event(
                run_id,
                sequence,
                event,
                event_type,
                payload_ref,
                payload_hash,
                previous,
                link,
                recorded_at,
            )
            out.append(appended)
            if event.record is not None:
                batch.projections.append((event, event.record, appended, inline))
            previous = link
        heads[run_id] = (sequence, previous)
        batch.results.append(out)
        batch.artifact_raws.extend(request.artifact_raws)
        batch.subjects.extend(request.subjects)
    return batch


def _head_for(request: AppendRequest, heads: dict[str, tuple[int, str]]) -> tuple[int, str]:
    """The head ``request`` links onto: refuses a run that does not exist or an expected
    sequence that is not the next one."""
    if request.run_id not in heads:
        raise RunNotFoundError(f"run not found: {request.run_id!r}")
    sequence, previous = heads[request.run_id]
    expected = request.expected_sequence
    if expected is not None and expected != sequence + 1:
        raise SequenceConflictError(
            f"run {request.run_id!r}: append expected sequence {expected} but "
            f"the next sequence is {sequence + 1}"
        )
    return sequence, previous


def appended_event(
    run_id: str,
    sequence: int,
    event: NewEvent,
    event_type: str,
    payload_ref: str,
    payload_hash: str,
    previous: str,
    link: str,
    recorded_at: datetime,
) -> ExecutionEvent:
    """The ``ExecutionEvent`` of an appended event. Its hashes, sequence, reference and
    schema version were made here; what the caller gave (ids, step, type, instants) is checked
    as the model checks it, and anything the cheap checks do not vouch for is validated by
    the model, which names the problem. (Validation is a third of the linking's CPU, and
    pydantic's ``model_construct`` is slower than validating.)"""
    values: dict[str, Any] = {  # in the model's field order (a dump's order)
        "schema_version": CHAIN_SCHEMA_VERSION,
        "sequence": sequence,
        "event_id": event.event_id,
        "run_id": run_id,
        "step_id": event.step_id,
        "type": event.type,
        "payload_ref": payload_ref,
        "payload_hash": payload_hash,
        "previous_hash": previous,
        "hash": link,
        "logical_time": event.logical_time,
        "recorded_at": recorded_at,
    }
    if (
        _TRUSTED_CONSTRUCTION
        and type(event.type) is ExecutionEventType
        and _is_identifier(event.event_id)
        and _is_identifier(run_id)
        and type(event.step_id) is str
        and _is_utc(event.logical_time)
        and _is_utc(recorded_at)
        and is_digest(payload_hash)
        and is_digest(previous)
    ):
        made = ExecutionEvent.__new__(ExecutionEvent)
        # what pydantic's model_construct sets, for a model with no extra or private fields
        object.__setattr__(made, "__dict__", values)
        object.__setattr__(made, "__pydantic_fields_set__", set(values))
        object.__setattr__(made, "__pydantic_extra__", None)
        object.__setattr__(made, "__pydantic_private__", None)
        return made
    return ExecutionEvent(**values)


#: the longest identifier a record accepts (``models.base.Identifier``)
_ID_MAX = 512
#: the construction above is what ``model_construct`` does for this model only while it has
#: no private attributes, no post-init hook and its fields are the values given, in order
_TRUSTED_CONSTRUCTION = (
    not ExecutionEvent.__private_attributes__
    and ExecutionEvent.__pydantic_post_init__ is None
    and tuple(ExecutionEvent.model_fields)
    == (
        "schema_version",
        "sequence",
        "event_id",
        "run_id",
        "step_id",
        "type",
        "payload_ref",
        "payload_hash",
        "previous_hash",
        "hash",
        "logical_time",
        "recorded_at",
    )
)


def _is_identifier(value: object) -> bool:
    return type(value) is str and 0 < len(value) <= _ID_MAX


def _is_utc(value: object) -> bool:
    """An aware instant already in UTC: what the model's validation leaves as it is."""
    return type(value) is datetime and value.tzinfo is UTC


def projected(event: NewEvent, record: HashedRecord, appended: ExecutionEvent) -> ProjectedRecord:
    """The lookup row to write for ``record``, carried by ``event`` appended as ``appended``."""
    return ProjectedRecord(
        record,
        run_id=appended.run_id,
        step_id=event.step_id,
        event_id=event.event_id,
        sequence=appended.sequence,
        content_hash=appended.payload_hash,
    )


def fast_rows(
    batch: LinkedBatch, recorded_at: datetime
) -> dict[Table, list[dict[str, Any]]] | None:
    """The rows of a linked batch for the batch writer, every table's (None: only the general
    path can write them, see ``projections.plain_insert_rows``)."""
    if batch.subjects:
        # people learned: their registrations are chained in the governance log
        # (``stores.sql.governance``), which these rows do not write. ``SqlLedger._write_fast``
        # takes them out of the batch first and hands them to the batch writer, which
        # registers them in the same transaction; anyone else (a run started through the
        # batch writer) leaves them to the general path
        return None
    lookups = plain_insert_rows(
        [
            (
                projected(event, record, appended),
                # the record's JSON is the event's canonical payload: reused, not dumped again
                (
                    inline if inline is not None else canonicalize(record.canonical_payload())
                ).decode(),
            )
            for event, record, appended, inline in batch.projections
        ],
        recorded_at,
    )
    if lookups is None:
        return None
    # an artifact's raw row kept already (another process) fails the insert: the general path
    raw_rows = [*batch.raw_rows, *batch.artifact_raws]
    return {
        schema.execution_events: batch.rows,
        schema.raw_payloads: raw_rows,
        **lookups,
        schema.run_subjects: batch.subjects,  # empty here (refused above)
    }
