"""Byte-identical output to the ``rfc8785`` reference package on 100,000 random documents.

Where rfc8785 0.1.x and Replaybook could differ, and how this test handles it:
- rfc8785 does no Unicode normalisation; Replaybook applies NFC first (its one deliberate
  departure from plain RFC 8785). Generated strings and keys are NFC already, so both agree.
- Both refuse ints beyond ±(2**53-1) and sort keys by UTF-16 code units (checked below), so
  generated ints stay within the safe range and astral-plane keys are fair game.
- Both print -0.0 as 0 and integral floats without a fraction; floats come from random bits.
"""

from __future__ import annotations

import random
import struct
import unicodedata
from typing import Any

import pytest
import rfc8785

from models.canonical import SAFE_INTEGER_MAX, canonicalize

DOCUMENTS = 100_000

# Characters from every range that matters: ASCII (incl. controls, quote, backslash, DEL),
# Latin-1, combining marks (NFC composes them), BMP above the surrogates (U+E000-U+FFFF, the
# range where UTF-16 and code-point order disagree) and astral-plane emoji.
_ALPHABET = (
    [chr(c) for c in range(0x20, 0x7F)] * 4
    + [chr(c) for c in range(0x00, 0x20)]
    + ['"', "\\", "/", "\x7f", "\u2028"]
    + [chr(c) for c in range(0xA0, 0x180)]
    + ["\u0301", "\u0308", "\u030a", "\u0327", "\u05bc"]
    + ["\u4e2d", "\u65e5", "\u20ac", "\ufb33", "\ue000", "\uff21", "\ufffd"]
    + ["\U0001f600", "\U0001f602", "\U00010348", "\U0001d11e", "\U00020000"]
)


def _string(rng: random.Random, max_len: int) -> str:
    s = "".join(rng.choices(_ALPHABET, k=rng.randint(0, max_len)))
    return unicodedata.normalize("NFC", s)  # rfc8785 does not normalise; see the docstring


def _float(rng: random.Random) -> float:
    while True:
        x = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0]
        if x == x and x not in (float("inf"), float("-inf")):
            return x


def _scalar(rng: random.Random) -> Any:
    kind = rng.randrange(10)
    if kind < 3:
        return _string(rng, 12)
    if kind < 5:
        return (
            rng.randint(-1000, 1000)
            if rng.random() < 0.5
            else rng.randint(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
        )
    if kind < 7:
        return _float(rng) if rng.random() < 0.7 else rng.choice([0.5, -0.0, 1.0, 1e21, 2.5e-6])
    if kind < 9:
        return rng.random() < 0.5
    return None


def _value(rng: random.Random, depth: int) -> Any:
    if depth >= 3 or rng.random() < 0.4:
        return _scalar(rng)
    size = rng.randint(0, rng.choice((2, 4, 8)))  # up to 8 members, mostly fewer
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) for _ in range(size)]
    # keys are NFC already, so they stay distinct after Replaybook's normalisation
    return {_string(rng, 6): _value(rng, depth + 1) for _ in range(size)}


def test_rfc8785_reference_behaviour_assumed_here() -> None:
    with pytest.raises(rfc8785.CanonicalizationError):
        rfc8785.dumps(2**53)
    assert rfc8785.dumps({"\ue000": 1, "\U0001f600": 2}) == canonicalize(
        {"\ue000": 1, "\U0001f600": 2}
    )
    assert rfc8785.dumps("A\u030a") != canonicalize("A\u030a")  # no NFC in rfc8785


def test_byte_identical_to_rfc8785_on_random_documents() -> None:
    rng = random.Random(8785)
    for i in range(DOCUMENTS):
        doc = _value(rng, 0)
        ours = canonicalize(doc)
        reference = rfc8785.dumps(doc)
        assert ours == reference, (i, doc)
