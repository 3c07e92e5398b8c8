"""External anchors, as pure rules: a run's (or the audit log's) head written outside the
database, so that truncating a run and rewriting its head, re-chaining it, or deleting it, which
the database alone cannot reveal, disagree with something the attacker cannot rewrite.

An anchor ``{run_id, sequence, head, at}`` is one entry of an append-only anchor log whose
entries are hash-chained like the events of a run:

    entry_hash_n = SHA-256( canonical({anchor_n, index_n, previous_n}) ),  previous_1 = GENESIS

so an entry cannot be edited, dropped or reordered without breaking the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from models.base import Identifier, Instant, Record
from models.canonical import canonical_hash
from models.chain import VerificationProblem
from models.digest import Digest, sha256_digest

__all__ = [
    "ANCHOR_GENESIS",
    "AUDIT_GENESIS",
    "AUDIT_LOG_ID",
    "Anchor",
    "AnchorEntry",
    "anchor_entry",
    "audit_link",
    "check_head",
    "verify_anchor_log",
    "verify_audit_chain",
]

ANCHOR_GENESIS = sha256_digest(b"replaybook:anchor-log:v1")
#: the run id under which the chained audit log of raw reads is anchored
AUDIT_LOG_ID = "audit:raw-reads"


class Anchor(Record):
    """A head as it was at ``at``: ``head`` is the hash of the event at ``sequence``."""

    kind: Literal["run", "audit"] = "run"
    run_id: Identifier
    sequence: int = Field(ge=0)
    head: Digest
    at: Instant


class AnchorEntry(Record):
    """An anchor in the log, hash-linked to the entry before it."""

    index: int = Field(ge=1)
    anchor: Anchor
    previous: Digest
    hash: Digest


def _entry_hash(index: int, anchor: Anchor, previous: str) -> str:
    return canonical_hash(
        {"anchor": anchor.model_dump(mode="json"), "index": index, "previous": previous}
    )


def anchor_entry(anchor: Anchor, index: int, previous: str) -> AnchorEntry:
    """The log entry of ``anchor`` at ``index`` after the entry whose hash is ``previous``."""
    return AnchorEntry(
        index=index, anchor=anchor, previous=previous, hash=_entry_hash(index, anchor, previous)
    )


def verify_anchor_log(entries: Sequence[AnchorEntry]) -> list[VerificationProblem]:
    """Problems of a log read in index order: a gap, a broken link, an edited entry."""
    problems: list[VerificationProblem] = []
    previous, expected = ANCHOR_GENESIS, 1
    for entry in entries:
        where = f"anchor log entry {entry.index}"
        if entry.index != expected:
            problems.append(_log_problem(expected, f"anchor log entry {expected} is missing"))
        elif entry.previous != previous:
            problems.append(_log_problem(entry.index, f"{where} does not link to the one before"))
        elif _entry_hash(entry.index, entry.anchor, entry.previous) != entry.hash:
            problems.append(_log_problem(entry.index, f"{where} was edited: its hash differs"))
        if problems:
            return problems
        previous, expected = entry.hash, expected + 1
    return problems


def _log_problem(index: int, message: str) -> VerificationProblem:
    return VerificationProblem(sequence=None, kind="anchor", message=f"{message} (index {index})")


def check_head(
    anchor: Anchor, hashes: Sequence[str], *, what: str = "anchor"
) -> VerificationProblem | None:
    """``hashes[i]`` is the stored hash of the event at sequence ``i + 1``: the anchored head
    must still be there, at the anchored sequence (a truncated, re-chained or rewritten run
    is not)."""
    if anchor.sequence == 0 and not hashes:
        return None
    if anchor.sequence <= len(hashes) and hashes[anchor.sequence - 1] == anchor.head:
        return None
    if not hashes:
        has = "no events"
    elif anchor.sequence <= len(hashes):
        has = f"{hashes[anchor.sequence - 1]} there"
    else:
        has = f"{len(hashes)} events ending in {hashes[-1]}"
    return VerificationProblem(
        sequence=anchor.sequence,
        kind="anchor",
        message=f"{what} at sequence {anchor.sequence} says head {anchor.head}, ledger has {has}",
    )


# the audit log of raw reads ------------------------------------------------------------------

AUDIT_GENESIS = sha256_digest(b"replaybook:audit-chain:v1")


def audit_link(previous_hash: str, position: int, record: dict[str, object]) -> str:
    """``SHA-256(canonical({position, previous, record}))``: an audit record's link."""
    return canonical_hash({"position": position, "previous": previous_hash, "record": record})


def verify_audit_chain(
    rows: Sequence[tuple[int, str, str, dict[str, object]]],
) -> list[VerificationProblem]:
    """Problems of the audit chain from ``(position, previous_hash, hash, record)`` rows in
    position order: a missing, edited or reordered record."""
    previous, expected = AUDIT_GENESIS, 1
    for position, previous_hash, hash_, record in rows:
        where = f"audit record {record.get('audit_id')} at position {position}"
        problem = None
        if position != expected:
            problem = f"audit record at position {expected} is missing"
        elif previous_hash != previous:
            problem = f"{where} does not link to the record before"
        elif audit_link(previous, position, record) != hash_:
            problem = f"{where} was edited: its hash differs"
        if problem is not None:
            return [VerificationProblem(sequence=position, kind="audit", message=problem)]
        previous, expected = hash_, expected + 1
    return []
