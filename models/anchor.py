"""External anchors, as pure rules: a run's (or the audit log's) head written outside the
database, so that truncating a run and rewriting its head, re-chaining it, or deleting it, which
the database alone cannot reveal, disagree with something the attacker cannot rewrite.

An anchor ``{run_id, sequence, head, at}`` is one entry of an append-only anchor log whose
entries are hash-chained like the events of a run:

    entry_hash_n = SHA-256( canonical({anchor_n, index_n, previous_n}) ),  previous_1 = GENESIS

so an entry cannot be edited, dropped or reordered without breaking the log.

Version 2 entries (written since the log moved out of the artifact store) are also signed:
``entry_hash`` then covers ``{anchor, index, previous, version, key_id}`` and ``signature`` is
Ed25519 over ``signed_bytes(entry)`` by the anchor signing key (``stores.anchor_signing``), whose
private half is in neither the database nor any store. ``index`` is the log's length once the
entry is written: a signed entry found anywhere (the run's own copy, a verifier's notes) says
how long the log was at least, so deleting the newest entries is seen by whoever holds one.
Version 1 entries (unsigned, written beside the artifacts) stay readable and are reported as
unsigned; an unsigned entry after a signed one is a forgery.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    "RunAnchor",
    "SignatureCheck",
    "anchor_entry",
    "audit_link",
    "check_head",
    "entry_hash_holds",
    "entry_problem",
    "signed_bytes",
    "unsigned_prefix",
    "verify_anchor_log",
    "verify_audit_chain",
]

ANCHOR_GENESIS = sha256_digest(b"replaybook:anchor-log:v1")
#: the run id under which the chained audit log of raw reads is anchored
AUDIT_LOG_ID = "audit:raw-reads"


class Anchor(Record):
    """A head as it was at ``at``: ``head`` is the hash of the event at ``sequence``."""

    kind: Literal["run", "audit", "governance"] = "run"
    run_id: Identifier
    sequence: int = Field(ge=0)
    head: Digest
    at: Instant


class AnchorEntry(Record):
    """An anchor in the log, hash-linked to the entry before it; ``index`` is the log's length
    with this entry. Version 2 is signed (``key_id``, base64 ``signature``)."""

    index: int = Field(ge=1)
    anchor: Anchor
    previous: Digest
    hash: Digest
    version: Literal[1, 2] = 1
    key_id: str | None = None
    signature: str | None = None

    @property
    def signed(self) -> bool:
        return self.version >= 2


def _entry_hash(
    index: int, anchor: Anchor, previous: str, version: int = 1, key_id: str | None = None
) -> str:
    body: dict[str, object] = {
        "anchor": anchor.model_dump(mode="json"),
        "index": index,
        "previous": previous,
    }
    if version >= 2:
        body |= {"version": version, "key_id": key_id}
    return canonical_hash(body)


def anchor_entry(
    anchor: Anchor, index: int, previous: str, *, key_id: str | None = None
) -> AnchorEntry:
    """The log entry of ``anchor`` at ``index`` after the entry whose hash is ``previous``
    (version 2, to be signed, when ``key_id`` names the signing key)."""
    version: Literal[1, 2] = 1 if key_id is None else 2
    return AnchorEntry(
        index=index,
        anchor=anchor,
        previous=previous,
        hash=_entry_hash(index, anchor, previous, version, key_id),
        version=version,
        key_id=key_id,
    )


def signed_bytes(entry: AnchorEntry) -> bytes:
    """What the anchor key signs: the entry's hash, under a domain of its own."""
    return b"replaybook:anchor-entry:v2\x00" + entry.hash.encode()


def entry_hash_holds(entry: AnchorEntry) -> bool:
    """Whether ``entry.hash`` is the hash of its content."""
    return entry.hash == _entry_hash(
        entry.index, entry.anchor, entry.previous, entry.version, entry.key_id
    )


#: is this version 2 entry signed by the trusted anchor key?
SignatureCheck = Callable[[AnchorEntry], bool]


def entry_problem(entry: AnchorEntry, signed_by: SignatureCheck | None) -> str | None:
    """What is wrong with one entry on its own: an edited content, a missing or foreign
    signature (None: nothing)."""
    where = f"anchor log entry {entry.index}"
    if not entry_hash_holds(entry):
        return f"{where} was edited: its hash differs"
    if entry.signed and signed_by is not None and not signed_by(entry):
        return (
            f"{where} is forged: not signed by the anchor key"
            f"{'' if entry.key_id is None else f' (it names key {entry.key_id})'}"
        )
    return None


def verify_anchor_log(
    entries: Sequence[AnchorEntry], signed_by: SignatureCheck | None = None
) -> list[VerificationProblem]:
    """Problems of a log read in index order: a gap, a broken link, an edited entry and, with
    ``signed_by``, a version 2 entry not signed by the trusted key, or an unsigned entry after
    a signed one (only a log's oldest entries may predate signing)."""
    previous, expected, seen_signed = ANCHOR_GENESIS, 1, False
    for entry in entries:
        where = f"anchor log entry {entry.index}"
        problem = None
        if entry.index != expected:
            index, problem = expected, f"anchor log entry {expected} is missing"
        else:
            index = entry.index
            if entry.previous != previous:
                problem = f"{where} does not link to the one before"
            elif signed_by is not None and seen_signed and not entry.signed:
                problem = f"{where} is forged: unsigned after signed entries"
            else:
                problem = entry_problem(entry, signed_by)
        if problem is not None:
            return [_log_problem(index, problem)]
        seen_signed = seen_signed or entry.signed
        previous, expected = entry.hash, expected + 1
    return []


def unsigned_prefix(entries: Sequence[AnchorEntry]) -> int:
    """How many of the log's oldest entries predate signing (version 1)."""
    count = 0
    for entry in entries:
        if entry.signed:
            break
        count += 1
    return count


class RunAnchor(Record):
    """What the anchor log says of one run: its latest entry (None: the run has none), whether
    that entry is signed, where it was read, and the problems met finding it (a forged entry,
    entries deleted from the log's end)."""

    location: str
    entry: AnchorEntry | None = None
    signed: bool = False
    #: read from the unsigned log an earlier version wrote beside the artifacts
    legacy: bool = False
    problems: tuple[VerificationProblem, ...] = ()


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
