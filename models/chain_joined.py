"""``verify_chain`` for an intact chain read as joined texts, one per column and chunk of events.

A store that can aggregate (``string_agg`` / ``group_concat``) hands each chunk of a run's
events, in ascending ``sequence`` order, as a few texts instead of rows: the sequences, previous
hashes, hashes and inline payloads' hashes each joined with ``,``, and the chained texts
(``previous_hash ‖ metadata ‖ payload_hash``, written by the store from
``models.chain.TEMPLATE_LITERALS``) joined with a line feed. Every check then runs over whole
texts natively (one comparison each); the only per-event work is hashing.

Why a joined comparison is exact per event: the separator is a character that no expected
element holds (a digest, a decimal sequence, a template text), so two joins are equal only when
they have the same number of elements and each element is equal. A NULL dropped by the
aggregate, a separator inside a tampered value or one row too many or too few changes the join.
"""

from __future__ import annotations

import functools
import hashlib
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from models.chain import GENESIS_HASH, TEMPLATE_LITERALS, ChainVerification
from models.digest import DIGEST_PREFIX

__all__ = ["ChainChunk", "JoinedChainCheck", "joined_digests", "verify_chain_chunks"]

#: what separates the elements of a joined column and the chained texts of a chunk
SEPARATOR = ","
TEXT_SEPARATOR = "\n"
_DIGEST_LENGTH = len(GENESIS_HASH)
#: the quotes of the template (9 keys, 7 texts) and of nothing else
_TEMPLATE_QUOTES = "".join(TEMPLATE_LITERALS).count('"')
#: the characters a JSON text holds as themselves (printable ASCII but the quote and
#: backslash) and the line feed between texts: deleting them must leave only the quotes
_PLAIN_OR_SEPARATOR = bytes(
    sorted(set(range(0x20, 0x7F)) - {ord('"'), ord("\\")} | {ord(TEXT_SEPARATOR)})
)
_digest = operator.methodcaller("digest")


@dataclass(frozen=True, slots=True)
class ChainChunk:
    """Consecutive events of a run as joined texts, in ascending ``sequence`` order."""

    count: int
    #: the decimal sequences, joined by ``SEPARATOR``
    sequences: str | None
    #: each event's ``previous_hash`` and ``hash``, joined by ``SEPARATOR``
    previous_hashes: str | None
    hashes: str | None
    #: the chained texts, joined by ``TEXT_SEPARATOR``
    texts: str | None
    #: the inline payloads (None ones left out) and their ``payload_hash``, joined by
    #: ``SEPARATOR`` (None when the chunk has no inline payload)
    payloads: Sequence[bytes]
    payload_hashes: str | None


def joined_digests(data: Iterable[bytes]) -> str:
    """``sha256_digest`` of each, joined by ``SEPARATOR``: the hashing is the only step per
    item (the hex text, prefixes and separators are written for all of them at once)."""
    raw = b"".join(map(_digest, map(hashlib.sha256, data)))
    if not raw:
        return ""
    return DIGEST_PREFIX + raw.hex(SEPARATOR, 32).replace(SEPARATOR, SEPARATOR + DIGEST_PREFIX)


@functools.lru_cache(maxsize=64)
def _sequence_text(first: int, count: int) -> str:
    """``first .. first + count - 1`` in decimal, joined (the same for every run's chunk)."""
    return SEPARATOR.join(map(str, range(first, first + count)))


def _chunk_hashes(chunk: ChainChunk, first: int, previous: str) -> str | None:
    """The chunk's joined hashes if it verifies after ``first - 1`` events ending in
    ``previous``, else None."""
    n = chunk.count
    if n <= 0 or chunk.sequences != _sequence_text(first, n) or chunk.texts is None:
        return None
    # a non-ASCII text is not written by the template: its UTF-8 bytes fail the check below
    data = chunk.texts.encode()
    texts = data.split(TEXT_SEPARATOR.encode())
    # the template is the canonical form only when no text needs escaping: deleting the
    # printable ASCII characters that need none (and the line feeds between texts) must leave
    # only the template's quotes; a line feed inside a text makes one text too many
    if len(texts) != n or data.translate(None, _PLAIN_OR_SEPARATOR) != b'"' * (
        _TEMPLATE_QUOTES * n
    ):
        return None
    hashes = joined_digests(texts)
    if chunk.hashes != hashes:
        return None
    # each previous hash is the hash before it: the chunk's hashes shifted by one
    if chunk.previous_hashes != (previous + SEPARATOR + hashes)[: -(_DIGEST_LENGTH + 1)]:
        return None
    if chunk.payloads:
        if chunk.payload_hashes != joined_digests(chunk.payloads):
            return None
    elif chunk.payload_hashes is not None:
        return None
    return hashes


class JoinedChainCheck:
    """``verify_chain`` for an intact chain read as ``ChainChunk``s, consecutive and in order,
    fed one at a time (a store reads the next chunk while this one is hashed)."""

    def __init__(self) -> None:
        self.count = 0
        self.head = GENESIS_HASH
        self.intact = True

    def add(self, chunk: ChainChunk) -> bool:
        """Whether ``chunk`` verifies after the chunks added so far (once not, never again)."""
        if not self.intact or (chunk.count == 0 and self.count == 0):
            return self.intact  # an empty run reads as one empty chunk
        hashes = _chunk_hashes(chunk, self.count + 1, self.head)
        if hashes is None:
            self.intact = False
            return False
        self.count += chunk.count
        self.head = hashes[-_DIGEST_LENGTH:]
        return True

    def verification(
        self, run_id: str, *, expected_head: tuple[int, str]
    ) -> ChainVerification | None:
        """The verification when every chunk verified and the chain ends at
        ``expected_head``, else None (``verify_chain`` then names what and where, or verifies
        what the template cannot write)."""
        if not self.intact or expected_head != (self.count, self.head):
            return None
        return ChainVerification(
            run_id=run_id,
            intact=True,
            event_count=self.count,
            head_sequence=self.count,
            head_hash=self.head,
        )


def verify_chain_chunks(
    run_id: str, chunks: Iterable[ChainChunk], *, expected_head: tuple[int, str]
) -> ChainVerification | None:
    """``verify_chain`` for an intact chain read as ``ChainChunk``s (consecutive, in order):
    the verification when the chain is intact and ends at ``expected_head``, None when anything
    does not verify or a text is not plain printable ASCII without escapes."""
    check = JoinedChainCheck()
    for chunk in chunks:
        if not check.add(chunk):
            return None
    return check.verification(run_id, expected_head=expected_head)
