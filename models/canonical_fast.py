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
  set, a byte pattern found by one regular-expression search. A match can be a false alarm
  (the pattern across string, length or other floats' bytes: likely in a megabyte of floats),
  so a match is settled by reading the output back: ``orjson.loads(out) == value`` holds only
  when no float became ``null`` (a tuple, read back as a list, also fails it: slow path);
- text that is not NFC, and objects whose keys sort differently by UTF-16 code units than by
  code points (only possible when the text has characters above U+FFFF *and* in U+E000–U+FFFF):
  text whose every character has canonical combining class 0 and NFC_Quick_Check=Yes
  ("stable") is NFC (UAX #15's quick check answers YES; ASCII characters all are), so only
  text with another character is checked whole. First, at memchr speed: the UTF-8 lead bytes
  of every unstable character are known (``_unsafe_leads``, from the Unicode database); text
  with none of them (Latin-1 and most Latin, Cyrillic, CJK ideographs, Hangul, emoji...) is
  stable. Otherwise the set of distinct non-ASCII characters (its non-ASCII bytes cut out
  natively) decides, and text with an unstable one is checked whole. The emitted text is NFC
  whenever each string in it is (JSON's delimiters and escapes are ASCII characters that
  compose with nothing before them);
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
from unicodedata import combining, decomposition, is_normalized, unidata_version

import orjson

from models import canonical_unicode

__all__ = ["emit_fast", "unstable_ranges"]

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
#: whether there is any ``.0`` at all: a regular expression finds it 3x faster than ``bytes in``
_POINT_ZERO_ANY = re.compile(rb"\.0")
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


#: the UTF-8 lead bytes (as 1-byte strings) of every character that is not stable, a pattern
#: matching such a character of the BMP (``re`` tests a class of BMP characters in one step,
#: a class with astral ranges range by range: 50x slower), and the astral ranges (see
#: ``unsafe_ranges``)
_UNSAFE: tuple[tuple[bytes, ...], re.Pattern[str], list[tuple[int, int]]] | None = None
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def unsafe_ranges() -> list[tuple[int, int]]:
    """The code point ranges of every character that is not stable, from the Unicode database
    (characters from plane 4 on, lead bytes F1-F4, all count: none has a decomposition or a
    combining class today, and scanning them would cost 0.3 s). ~0.1 s: the table in
    ``models.canonical_unicode`` serves it when the Unicode version is the same."""
    composing = _composing()
    ranges: list[tuple[int, int]] = []
    for c in range(0x80, 0x40000):
        if 0xD800 <= c < 0xE000:
            continue
        ch = chr(c)
        # only a character with a decomposition can be NFC_Quick_Check=No
        if not (
            combining(ch) or ch in composing or (decomposition(ch) and not is_normalized("NFC", ch))
        ):
            continue
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    ranges.append((0x40000, 0x10FFFF))
    return ranges


def unstable_ranges() -> list[tuple[int, int]]:
    """``unsafe_ranges()`` for the running Unicode database: the table of
    ``models.canonical_unicode`` when its version is the same, else computed (~0.1 s)."""
    if canonical_unicode.UNIDATA_VERSION == unidata_version:
        return canonical_unicode.unsafe_ranges()
    return unsafe_ranges()


def _unsafe() -> tuple[tuple[bytes, ...], re.Pattern[str], list[tuple[int, int]]]:
    global _UNSAFE
    if _UNSAFE is None:
        ranges = unstable_ranges()
        # the lead byte of UTF-8 grows with the code point: a range's leads are its ends' and
        # every byte between
        leads = {
            lead for a, b in ranges for lead in range(chr(a).encode()[0], chr(b).encode()[0] + 1)
        }
        bmp = "".join(f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges if b <= 0xFFFF)
        astral = [(a, b) for a, b in ranges if b > 0xFFFF]
        _UNSAFE = tuple(bytes([b]) for b in sorted(leads)), re.compile(f"[{bmp}]"), astral
    return _UNSAFE


def _stable_astral(chars: str, ranges: list[tuple[int, int]]) -> bool:
    """Whether no character above U+FFFF of ``chars`` is in ``ranges``."""
    for ch in set(_ASTRAL.findall(chars)):
        c = ord(ch)
        if any(a <= c <= b for a, b in ranges):
            return False
    return True


_HIGH_BMP = re.compile("[\ue000-\uffff]")


def _stable_text(out: bytes) -> bool:
    """Whether the non-ASCII text of ``out`` is NFC and orders keys alike by code point and by
    UTF-16 code unit (False: only the slow path can tell)."""
    leads, unsafe, astral_ranges = _unsafe()
    astral = b"\xf0" in out or b"\xf1" in out or b"\xf2" in out or b"\xf3" in out or b"\xf4" in out
    high_bmp = astral and (b"\xee" in out or b"\xef" in out)  # U+E000-U+FFFF and astral
    if not high_bmp and not any(lead in out for lead in leads):
        return True  # every non-ASCII character is stable (each 1-byte search is a memchr)
    # the non-ASCII bytes are whole UTF-8 sequences, so they decode to those characters
    chars = out.translate(None, _ASCII).decode()
    if high_bmp and _HIGH_BMP.search(chars):
        return False
    if unsafe.search(chars) is None and (not astral or _stable_astral(chars, astral_ranges)):
        return True
    return is_normalized("NFC", out.decode())


def _refuse(value: Any) -> Any:
    raise TypeError(type(value).__name__)


def _found(data: bytes, first: bytes, pattern: re.Pattern[bytes], hops: int = 12) -> bool:
    """``pattern.search(data) is not None`` for a pattern whose every match starts with the
    byte ``first``. A regular expression scans ~4 bytes a nanosecond, ``bytes.find`` of one byte
    (memchr) 100: in a large text the first few occurrences are tried by memchr hops, and only
    a text with more of them is scanned by the expression (from the last hop on)."""
    if len(data) < 16_384:
        return pattern.search(data) is not None
    find, match = data.find, pattern.match
    i = find(first)
    for _ in range(hops):
        if i < 0:
            return False
        if match(data, i):
            return True
        i = find(first, i + 1)
    return i >= 0 and pattern.search(data, i) is not None


def emit_fast(value: Any, format_number: Callable[[float], str]) -> bytes | None:
    """The canonical bytes of ``value``, or None when only the slow path can tell."""
    try:
        out = orjson.dumps(value, default=_refuse, option=_OPTIONS)
        census = marshal.dumps(value, 4)
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        return None
    if _found(census, b"\x7f", _NON_FINITE_7F) or _found(census, b"\xff", _NON_FINITE_FF):
        try:
            if orjson.loads(out) != value:  # a float written as null (or a tuple)
                return None
        except (orjson.JSONDecodeError, RecursionError):
            return None
    if not out.isascii() and not _stable_text(out):
        return None
    point_zero = _found(out, b".", _POINT_ZERO_ANY)
    if (
        point_zero
        and not out.endswith(b".0")
        and not _found(census, b".", _STRING_POINT_ZERO)
        and not _found(census, b"\x80", _NEGATIVE_ZERO)
    ):
        # marshal holds every string (and key) as its UTF-8 bytes, and escaping neither makes
        # nor breaks ".0" followed by a delimiter, so no string of the output has one either
        out = _DROP_POINT_ZERO(out)
        point_zero = False
    # "e+" or "e-6" would stop at every "e" of the text: the searches start from "+" and "-"
    others = [
        pattern
        for pattern, first in zip(_OTHER_ENDS, (b"+", b"-"), strict=True)
        if _found(out, first, pattern)
    ]
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
