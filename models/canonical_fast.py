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
  checked on the emitted text, which is NFC whenever each string in it is (JSON's delimiters
  and escapes are ASCII characters that compose with nothing before them);
- number text: the doubles whose ES6 text differs (integral below 1e21, ``-0.0``, and those in
  [1e-6, 1e-5)) are the tokens this module's pattern finds outside strings; each is replaced
  by ``format_number`` text.

``emit_fast`` returns None whenever any check fails, and the caller takes the validating slow
path, which gives the exact bytes or the exact refusal (with its path). Whatever the fast path
returns is byte-identical to the slow path; ``tests/models/test_canonical_fast.py`` holds it to
that, and to ``rfc8785``, on random documents.
"""

from __future__ import annotations

import marshal
import re
from collections.abc import Callable
from typing import Any
from unicodedata import is_normalized

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
#: the ends of number tokens whose orjson text differs from ES6's (each pattern starts with a
#: literal, which the regular-expression engine finds at memchr speed): integral doubles below
#: 1e16 and -0.0 (``.0``), integral doubles in [1e16, 1e21) and doubles in [1e-6, 1e-5)
_FIX_ENDS = tuple(
    (literal, re.compile(pattern + rb"(?=[,\]}]|\Z)"))
    for literal, pattern in ((b".0", rb"\.0"), (b"+", rb"e\+(?:1[6-9]|20)"), (b"e-6", rb"e-6"))
)
#: ES6 text of the tokens met so far (documents repeat a few numbers: 0.0, 1.0, ...)
_FIXED: dict[bytes, bytes] = {}
_FIXED_MAX = 4096
#: a number token at the end of a window; outside strings, whatever precedes it is a delimiter
_TOKEN_TAIL = re.compile(rb"-?[0-9][0-9.e+-]*\Z")
#: a character above U+FFFF (lead byte F0-F4) and one in U+E000-U+FFFF (lead byte EE or EF)
_ASTRAL = re.compile(rb"[\xf0-\xf4]")


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
        if (b"\xee" in out or b"\xef" in out) and _ASTRAL.search(out):
            return None
        if not is_normalized("NFC", out.decode()):
            return None
    fixes = [pattern for literal, pattern in _FIX_ENDS if literal in out]
    return _fix_numbers(out, fixes, format_number) if fixes else out


def _fix_numbers(
    out: bytes, fixes: list[re.Pattern[bytes]], format_number: Callable[[float], str]
) -> bytes:
    """Replace the number tokens outside strings whose ES6 text differs from orjson's."""
    # Escaped backslashes and escaped quotes become two plain bytes (same length), so every
    # remaining quote delimits a string and a token is outside strings iff the count of quotes
    # before it is even.
    plain = out.replace(b"\\\\", b"__").replace(b'\\"', b"__") if b"\\" in out else out
    ends = [match.end() for pattern in fixes for match in pattern.finditer(plain)]
    if len(fixes) > 1:
        ends.sort()
    pieces: list[bytes] = []
    done = counted = quotes = 0
    for end in ends:
        quotes += plain.count(b'"', counted, end)
        counted = end
        if quotes % 2:  # inside a string
            continue
        token = _TOKEN_TAIL.search(plain, max(0, end - 32), end)
        assert token is not None  # a token's text is at most 24 bytes
        text = token[0]
        fixed = _FIXED.get(text)
        if fixed is None:
            fixed = format_number(float(text)).encode()
            if len(_FIXED) < _FIXED_MAX:
                _FIXED[text] = fixed
        pieces.append(out[done : token.start()])
        pieces.append(fixed)
        done = end
    pieces.append(out[done:])
    return b"".join(pieces)
