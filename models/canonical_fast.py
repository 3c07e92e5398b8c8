"""The native fast path of the canonical form: ``orjson`` emits, cheap native checks vouch.

``orjson`` with ``OPT_SORT_KEYS`` writes RFC 8785's string escaping and, for every double that
is not integral and not in [1e-6, 1e-5), ES6's number text; it refuses lone surrogates, ints
beyond ±(2**53-1) (``OPT_STRICT_INTEGER``), non-string keys and every type it does not know.
What it does not refuse, and how each is caught without a Python walk over the document:

- types it writes natively that the canonical form refuses or reads otherwise (plain ``Enum``,
  ``UUID``, ``Fragment``, every subclass): ``marshal`` (C) writes only exact builtin types and
  raises on anything else, so a document it accepts holds only dict, list, tuple, str, int,
  float, bool and None (what else marshal takes, orjson refuses);
- NaN and ±Infinity, which orjson writes as ``null``: each float is in marshal's output as a
  type byte and its 8 IEEE bytes (little-endian), and a non-finite one has all exponent bits
  set, a byte pattern found by one regular-expression search (a match inside string bytes is
  a false alarm that only costs the slow path);
- text that is not NFC, and objects whose keys sort differently by UTF-16 code units than by
  code points (only possible when the text has characters above U+FFFF *and* in U+E000–U+FFFF):
  decided from the set of distinct non-ASCII characters of the emitted text (its non-ASCII
  bytes, cut out natively). Text whose every character has canonical combining class 0 and
  NFC_Quick_Check=Yes is NFC (UAX #15's quick check answers YES; ASCII characters all are),
  so only text with another character is checked whole. The emitted text is NFC whenever each
  string in it is (JSON's delimiters and escapes are ASCII characters that compose with nothing
  before them);
- number text: the doubles whose ES6 text differs (integral below 1e21, ``-0.0``, and those in
  [1e-6, 1e-5)) are the tokens this module's patterns find outside strings. The common case,
  an integral double below 1e16 that orjson writes as ``<integer>.0``, loses its ``.0`` (and
  ``-0.0`` becomes ``0``); the others are replaced by ``format_number`` text.

``emit_fast`` returns None whenever any check fails, and the caller takes the validating slow
path, which gives the exact bytes or the exact refusal (with its path). Whatever the fast path
returns is byte-identical to the slow path; ``tests/models/test_canonical_fast.py`` holds it to
that, and to ``rfc8785``, on random documents.
"""

from __future__ import annotations

import functools
import marshal
import re
from collections.abc import Callable
from typing import Any
from unicodedata import combining, decomposition, is_normalized

import orjson

__all__ = ["emit_fast"]

_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)

#: a marshalled float (type byte ``g``, or ``g`` with marshal's reference flag) that is NaN or
#: infinite: little-endian, so the last byte is sign + 7 exponent bits (7F or FF), the one before
#: it the 4 low exponent bits and 4 mantissa bits (F0-FF). Each pattern starts with its literal
#: last byte, which the engine finds at memchr speed, and looks behind for the rest.
_NON_FINITE_7F, _NON_FINITE_FF = (
    re.compile(last + rb"(?<=[g\xe7][\x00-\xff]{6}[\xf0-\xff]" + last + rb")")
    for last in (rb"\x7f", rb"\xff")
)
#: the end of a number token that orjson writes for an integral double below 1e16 (and -0.0):
#: ``<integer>.0``; its ES6 text is the integer (``0`` for -0.0)
_POINT_ZERO = re.compile(rb"\.0(?=[,\]}]|\Z)")
#: the ends of the other number tokens whose orjson text differs from ES6's: integral doubles in
#: [1e16, 1e21) and doubles in [1e-6, 1e-5). Each pattern starts with its rarest literal ("+",
#: "-6"; "e" is in every word), which the engine finds at memchr speed, and looks behind for "e"
_OTHER_ENDS = tuple(
    re.compile(pattern + rb"(?=[,\]}]|\Z)")
    for pattern in (rb"\+(?<=e\+)(?:1[6-9]|20)", rb"-6(?<=e-6)")
)
#: the IEEE bytes of -0.0 as marshal writes them (little-endian): where they are found (or
#: happen to be in other bytes), the careful path writes "-0.0" as "0". A regular expression
#: that starts with the rare last byte runs 3x faster than ``bytes in`` on marshal's many NULs.
_NEGATIVE_ZERO = re.compile(rb"\x80(?<=\x00{7}\x80)")
#: a string (or key) holding ".0" before a delimiter, as marshal writes it (raw UTF-8): one pass
#: instead of a ``bytes in`` per delimiter (each as slow as this whole search)
_STRING_POINT_ZERO = re.compile(rb"\.0[,\]}]")
#: ``.0`` then a delimiter of a number token: when no string has it, every ``<integer>.0`` token
#: of the output is a number, and one native substitution fixes all
_DROP_POINT_ZERO = functools.partial(re.compile(rb"\.0(?=[,\]}])").sub, b"")
#: ES6 text of the other tokens met so far (documents repeat a few numbers)
_FIXED: dict[bytes, bytes] = {}
_FIXED_MAX = 4096
#: a number token at the end of a window; outside strings, whatever precedes it is a delimiter
_TOKEN_TAIL = re.compile(rb"-?[0-9][0-9.e+-]*\Z")
_ASCII = bytes(range(128))
#: the characters that sort after every character above U+FFFF by code point, before by UTF-16
_E000_FFFF = frozenset(map(chr, range(0xE000, 0x10000)))

#: non-ASCII characters known to have combining class 0 and NFC_Quick_Check=Yes ("stable");
#: filled as they are met (bounded: at most every assigned character once)
_STABLE: set[str] = set()
#: characters that may follow another one in a canonical composition (NFC_Quick_Check=Maybe, a
#: superset): computed on first need from the Unicode database
_COMPOSING: frozenset[str] | None = None


def _composing() -> frozenset[str]:
    global _COMPOSING
    if _COMPOSING is None:
        seconds = {chr(c) for c in range(0x1161, 0x1176)} | {chr(c) for c in range(0x11A8, 0x11C3)}
        for c in range(0xC0, 0x30000):  # canonical decompositions end below U+2FA1E
            parts = decomposition(chr(c)).split()
            if len(parts) == 2 and not parts[0].startswith("<"):
                seconds.add(chr(int(parts[1], 16)))
        _COMPOSING = frozenset(seconds)
    return _COMPOSING


def _all_stable(chars: set[str]) -> bool:
    """Whether every character has combining class 0 and NFC_Quick_Check=Yes."""
    new = chars - _STABLE
    if not new:
        return True
    composing = _composing()
    for c in new:
        # is_normalized on one character is False exactly for NFC_Quick_Check=No; Maybe is
        # what may compose with a character before it
        if combining(c) or c in composing or not is_normalized("NFC", c):
            return False
    _STABLE.update(new)
    return True


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def emit_fast(value: Any, format_number: Callable[[float], str]) -> bytes | None:
    """The canonical bytes of ``value``, or None when only the slow path can tell."""
    try:
        out = orjson.dumps(value, default=_refuse, option=_OPTIONS)
        census = marshal.dumps(value, 4)
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        return None
    if (b"\x7f" in census and _NON_FINITE_7F.search(census)) or (
        b"\xff" in census and _NON_FINITE_FF.search(census)
    ):
        return None
    if not out.isascii():
        # the non-ASCII bytes are whole UTF-8 sequences, so they decode to those characters
        chars = set(out.translate(None, _ASCII).decode())
        if max(chars) > "\uffff" and not chars.isdisjoint(_E000_FFFF):
            return None
        if not _all_stable(chars) and not is_normalized("NFC", out.decode()):
            return None
    point_zero = b".0" in out
    if (
        point_zero
        and not out.endswith(b".0")
        and not _STRING_POINT_ZERO.search(census)
        and not _NEGATIVE_ZERO.search(census)
    ):
        # marshal holds every string (and key) as its UTF-8 bytes, and escaping neither makes
        # nor breaks ".0" followed by a delimiter, so no string of the output has one either
        out = _DROP_POINT_ZERO(out)
        point_zero = False
    # "+" is rare in JSON text and found at memchr speed, so most documents skip even the
    # search; "-6" is searched by the pattern itself (the engine finds its literal faster than
    # ``bytes in`` finds a two-byte needle), "e+" or "e-6" would stop at every "e" of the text
    others = []
    if b"+" in out and _OTHER_ENDS[0].search(out):
        others.append(_OTHER_ENDS[0])
    if _OTHER_ENDS[1].search(out):
        others.append(_OTHER_ENDS[1])
    if point_zero or others:
        return _fix_numbers(out, point_zero, others, format_number)
    return out


def _fix_numbers(
    out: bytes,
    point_zero: bool,
    others: list[re.Pattern[bytes]],
    format_number: Callable[[float], str],
) -> bytes:
    """Replace the number tokens outside strings whose ES6 text differs from orjson's."""
    # Escaped backslashes and escaped quotes become two plain bytes (same length), so every
    # remaining quote delimits a string and a token is outside strings iff the count of quotes
    # before it is even. Without an escaped quote, every quote already delimits.
    plain = out.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b'\\"' in out else out
    ends = [match.end() for match in _POINT_ZERO.finditer(plain)] if point_zero else []
    if others:
        ends += [-match.end() for pattern in others for match in pattern.finditer(plain)]
        ends.sort(key=abs)
    pieces: list[bytes] = []
    append = pieces.append
    count = plain.count
    done = counted = quotes = 0
    for end in ends:
        if end > 0:  # <integer>.0
            quotes += count(b'"', counted, end)
            counted = end
            if quotes & 1:  # inside a string
                continue
            if out[end - 4 : end] == b"-0.0":  # outside strings "-" starts the token
                append(out[done : end - 4])
                append(b"0")
            else:
                append(out[done : end - 2])
            done = end
            continue
        end = -end
        quotes += count(b'"', counted, end)
        counted = end
        if quotes & 1:
            continue
        token = _TOKEN_TAIL.search(plain, max(0, end - 32), end)
        assert token is not None  # a token's text is at most 24 bytes
        text = token[0]
        fixed = _FIXED.get(text)
        if fixed is None:
            fixed = format_number(float(text)).encode()
            if len(_FIXED) < _FIXED_MAX:
                _FIXED[text] = fixed
        append(out[done : token.start()])
        append(fixed)
        done = end
    if not pieces:
        return out
    append(out[done:])
    return b"".join(pieces)
