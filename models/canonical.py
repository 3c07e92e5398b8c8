"""Canonical JSON (RFC 8785, JCS) and request hashing.

Replaybook's canonical form is RFC 8785 applied after Unicode NFC normalisation of every string
and every object key, so text that only differs in its Unicode composition hashes the same.
Everything without a canonical form is refused with a ``CanonicalizationError`` naming the
problem and its JSON path (``$.a[3].b``), never silently rounded or replaced: these bytes are
evidence.

Accepted Python values: ``dict`` (``str`` keys), ``list``, ``str``, ``int`` within
±(2**53 - 1), finite ``float``, ``bool``, ``None``. Also, as what they unambiguously mean:
``tuple`` as an array, subclasses of those types (``StrEnum``/``IntEnum`` members, ``OrderedDict``)
as their base value, and pydantic models as ``model_dump(mode="json")``. Everything else
(bytes, set, datetime, Decimal, other objects) is refused. An integral float within the safe
range is the same number as the int (``1.0`` hashes as ``1``).

How it is fast: the C extension ``models._canonical_native`` (``models/_canonical_native.c``,
built by ``pip install -e .``) writes every document of exact builtin types it can vouch for in
one pass and declines the rest (subclasses, models, refusals, text it cannot vouch is NFC...);
``ACCELERATED`` says whether it is in use (it is not when it could not be compiled or imported,
or when its import-time self-check disagrees with the reference). Then the native path of
``models.canonical_fast`` (orjson with sorted keys, vouched for by native checks) serves every
document it can prove it writes right; the others take the validating slow path, which also
names what is refused: every refusal comes from this module's reference rules. The slow path: one Python pass validates and builds a normalised copy whose dicts are already in
canonical key order (the only per-node Python work), then pydantic-core's Rust serialiser emits
it. Its string escaping is exactly RFC 8785's and its float text is ES6's except for integral
floats (made ints by the pass) and a few others, which the pass replaces by placeholders that are
swapped for ``format_number`` text after emission. An import-time self-check compares the
serialiser against the reference rules and falls back to the stdlib encoder if they ever differ.
"""

from __future__ import annotations

import json
import re
from math import isfinite
from typing import Any
from unicodedata import normalize

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

from models.canonical_fast import emit_fast, unstable_ranges
from models.digest import DIGEST_PREFIX, sha256_digest
from models.errors import CanonicalizationError

__all__ = [
    "ACCELERATED",
    "SAFE_INTEGER_MAX",
    "canonical_hash",
    "canonicalize",
    "canonicalize_flat",
    "canonicalize_text",
    "format_number",
    "normalize_json",
    "parse_json",
]

SAFE_INTEGER_MAX = 2**53 - 1
_MAX = SAFE_INTEGER_MAX

# Placeholder for a float whose text must come from format_number. U+212B (ANGSTROM SIGN) can
# never occur in NFC text (it normalises to U+00C5), so no normalised string can forge one.
_MARK = "\u212b"
_MARK_RE = re.compile(b'"' + _MARK.encode() + rb'(\d+)"')
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Invalid(Exception):
    """Internal: a refusal on its way up; each level adds its key or index to ``path``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.path: list[str | int] = []  # innermost first


class _Rejected:
    """Left in a parsed tree by the ``json`` hooks; the validating pass reports it with its path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Marks(list):
    """Floats replaced by placeholders; ``everything`` when the emitter formats no float right."""

    def __init__(self, everything: bool) -> None:
        super().__init__()
        self.everything = everything


def format_number(x: float) -> str:
    """ECMAScript ``Number::toString`` of a finite double, the RFC 8785 §3.2.2.3 number text."""
    if x == 0:
        return "0"  # also -0
    if not isfinite(x):
        raise ValueError(f"{x!r} has no JSON form")
    # repr gives the shortest digits that round-trip, the same digits ES6 asks for; only the
    # layout differs (Python switches to exponent form at 1e16 and 1e-4, ES6 at 1e21 and 1e-6).
    mantissa, _, exponent = repr(abs(x)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    leading_zeros = len(all_digits) - len(all_digits.lstrip("0"))
    digits = all_digits.strip("0")
    k = len(digits)
    n = len(whole) + int(exponent or 0) - leading_zeros  # value = 0.DIGITS * 10**n
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        text = f"0.{'0' * -n}{digits}"
    else:
        e = n - 1
        text = f"{digits[0]}{'.' if k > 1 else ''}{digits[1:]}e{'+' if e >= 0 else '-'}{abs(e)}"
    return "-" + text if x < 0 else text


def _int_reason(v: int) -> str:
    shown = str(v) if v.bit_length() < 200 else f"of {v.bit_length()} bits"
    return f"integer {shown} is outside the safe range ±(2**53-1); send it as a string"


def _text(s: str, what: str = "string") -> str:
    """NFC form of a non-ASCII string; lone surrogates have no UTF-8 form and are refused."""
    bad = _SURROGATE_RE.search(s)
    if bad:
        raise _Invalid(f"lone surrogate U+{ord(bad.group()):04X} in {what}")
    return normalize("NFC", s)  # returns s itself when it is already NFC


def _float(f: float, marks: _Marks | None) -> float | int | str:
    if f.is_integer():
        if -_MAX <= f <= _MAX:
            return int(f)  # exact, and prints as ES6 prints it (1.0 -> 1, -0.0 -> 0)
        special = abs(f) < 1e21
    elif not isfinite(f):
        raise _Invalid(f"number {f!r} is not a finite double (NaN, Infinity or overflow)")
    else:
        special = 9e-7 < abs(f) < 2e-5
    # pydantic-core writes every other double as ES6 does; the two "special" ranges it writes in
    # exponent form (bounds here are generous: a placeholder's text is always right).
    if marks is None or not (special or marks.everything):
        return f
    marks.append(f)
    return f"{_MARK}{len(marks) - 1}"


def _value(v: Any, marks: _Marks | None) -> Any:
    """Validate ``v`` and return its normalised copy; dicts come back in canonical key order."""
    t = type(v)
    if t is str:
        return v if v.isascii() else _text(v)
    if t is int:
        if -_MAX <= v <= _MAX:
            return v
        raise _Invalid(_int_reason(v))
    if t is dict:
        return _object(v, marks)
    if t is list:
        return _array(v, marks)
    if t is float:
        return _float(v, marks)
    if v is None or t is bool:
        return v
    # Rare cases, each taken as the JSON value it unambiguously is (see the module docstring).
    if isinstance(v, str):
        return _value(str.__str__(v), marks)  # StrEnum member -> its plain string
    if isinstance(v, int):
        return _value(int(v), marks)
    if isinstance(v, float):
        return _float(float(v), marks)
    if isinstance(v, dict):
        return _object(dict(v), marks)
    if isinstance(v, list | tuple):
        return _array(list(v), marks)
    if isinstance(v, BaseModel):
        return _value(v.model_dump(mode="json"), marks)
    if t is _Rejected:
        raise _Invalid(v.reason)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    raise _Invalid(f"unsupported type {name}: not a JSON value")


def _unicode_keys(d: dict) -> tuple[dict, list[str]]:
    """The slow path for keys: plain str in NFC, no collisions, ordered by UTF-16 code units."""
    named: dict[str, Any] = {}
    for key, v in d.items():
        if not isinstance(key, str):
            raise _Invalid(f"object key {key!r} ({type(key).__name__}) is not a string")
        name = str.__str__(key)
        if not name.isascii():
            name = _text(name, f"object key {name!r}")
        if name in named:
            raise _Invalid(f"duplicate object key {name!r} after Unicode NFC normalisation")
        named[name] = v
    # RFC 8785 §3.2.3 orders keys by UTF-16 code units, which differs from code-point order when
    # a key has a character above U+FFFF (encoded as surrogates D800-DFFF, below U+E000-U+FFFF).
    return named, sorted(named, key=lambda name: name.encode("utf-16-be"))


def _object(d: dict, marks: _Marks | None, keys: list[str] | None = None) -> dict:
    if keys is None:
        try:
            # ASCII keys (the usual case) are their own NFC form and their code-point order is
            # UTF-16 order; sorted() or join() raise TypeError on a non-string key.
            keys = sorted(d)
            plain = "".join(keys).isascii()
        except TypeError:
            keys, plain = [], False
        if not plain:
            named, keys = _unicode_keys(d)
            return _object(named, marks, keys)
    out = {}
    try:
        for k in keys:  # the common cases of _value, inlined: this loop is the hot path
            if type(k) is not str:
                break  # a str subclass (enum member) could collide with an equal plain key
            v = d[k]
            t = type(v)
            if t is str:
                if not v.isascii():
                    v = _text(v)
            elif t is int:
                if not -_MAX <= v <= _MAX:
                    raise _Invalid(_int_reason(v))
            elif t is dict:
                v = _object(v, marks)
            elif t is list:
                v = _array(v, marks)
            elif t is float:
                v = _float(v, marks)
            elif v is not None and t is not bool:
                v = _value(v, marks)
            out[k] = v
        else:
            return out
    except _Invalid as e:
        e.path.append(k)
        raise
    named, keys = _unicode_keys(d)
    return _object(named, marks, keys)


def _array(a: list, marks: _Marks | None) -> list:
    out: list[Any] = []
    append = out.append
    try:
        for v in a:  # same inlined dispatch as _object
            t = type(v)
            if t is str:
                if not v.isascii():
                    v = _text(v)
            elif t is int:
                if not -_MAX <= v <= _MAX:
                    raise _Invalid(_int_reason(v))
            elif t is dict:
                v = _object(v, marks)
            elif t is list:
                v = _array(v, marks)
            elif t is float:
                v = _float(v, marks)
            elif v is not None and t is not bool:
                v = _value(v, marks)
            append(v)
    except _Invalid as e:
        e.path.append(len(out))  # the index of the element that failed
        raise
    return out


def _format_path(path: list[str | int]) -> str:
    parts = ["$"]
    for p in reversed(path):
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif _IDENTIFIER_RE.match(p):
            parts.append(f".{p}")
        else:
            parts.append(f"[{json.dumps(p)}]")
    return "".join(parts)


def _walk(value: Any, marks: _Marks | None) -> Any:
    try:
        return _value(value, marks)
    except _Invalid as e:
        raise CanonicalizationError(e.reason, _format_path(e.path)) from None
    except RecursionError:
        raise CanonicalizationError("value is nested too deeply or contains a cycle") from None


def _emit(value: Any, rust: bool) -> bytes:
    marks = _Marks(everything=not rust)
    tree = _walk(value, marks)
    if rust:
        try:
            out = to_json(tree)
        except PydanticSerializationError:  # nesting deeper than pydantic-core allows
            return _emit(value, rust=False)
    else:
        try:
            out = json.dumps(tree, ensure_ascii=False, separators=(",", ":")).encode()
        except RecursionError:
            raise CanonicalizationError("value is nested too deeply") from None
    if marks:
        out = _MARK_RE.sub(lambda m: format_number(marks[int(m[1])]).encode(), out)
    return out


def _rust_agrees() -> bool:
    """Self-check: does pydantic-core write strings and (non-marked) floats as RFC 8785 does?"""
    text = "".join(map(chr, range(0x20))) + '"\\/\x7f\u2028\u2029é€😀'
    floats = [0.1, 1.5, 123.456, 0.30000000000000004, 2.5e-05, 0.0001, 2.5e-4, 3.7e-07, 8e-7]
    floats += [1e-7, 1e-300, 5e-324, 1.7976931348623157e308, 1e21, 2.0**80, 4.35, 1e15 + 0.3]
    floats += [-f for f in floats]
    reference = f"[{json.dumps(text, ensure_ascii=False)},{','.join(map(format_number, floats))}]"
    try:
        return to_json([text, *floats]) == reference.encode()
    except Exception:
        return False


_RUST_OK = _rust_agrees()


def _fast_agrees() -> bool:
    """Self-check: does the native fast path (``models.canonical_fast``) write what the
    reference rules write, on text and on every kind of number it has to fix up?"""
    text = "".join(map(chr, range(0x20))) + '"\\/\x7f\u2028\u2029é€😀'
    floats = [0.1, 1.5, 123.456, 0.30000000000000004, 2.5e-05, 0.0001, 3.7e-06, 5e-6, 8e-7]
    floats += [1e-7, 1e-300, 5e-324, 1.7976931348623157e308, 1e21, 2.0**80, 1e16, 0.0, 1.0]
    floats += [-f for f in floats]
    sample = {"text": text, "floats": floats, "b": [True, False, None, 0, -(2**53 - 1)]}
    try:
        return emit_fast(sample, format_number) == _emit(sample, rust=False)
    except Exception:
        return False


_FAST_OK = _fast_agrees()


def _native_module() -> Any:
    """The C extension, configured, when it imports and writes what the reference writes."""
    try:
        from models import _canonical_native as native
    except ImportError:  # not compiled here: the pure-Python paths give the same bytes
        return None
    native.configure(unstable_ranges(), normalize)
    text = "".join(map(chr, range(0x20))) + '"\\/\x7f\u2028\u2029é€😀 A\u030a \u212b ﬁ'
    floats = [0.1, 1.5, 123.456, 0.30000000000000004, 2.5e-05, 0.0001, 3.7e-06, 5e-6, 8e-7]
    floats += [1e-7, 1e-300, 5e-324, 1.7976931348623157e308, 1e21, 2.0**80, 1e16, 0.0, -0.0]
    floats += [-f for f in floats]
    sample = {
        "text": [text, text * 3],
        "floats": floats,
        "b": [True, False, None, 0, -(2**53 - 1), (1, "x")],
        "\U0001f600": {"\ue000": 1, "z": 2, "é": 3},
        **{f"k{i:03}": i for i in range(40)},
    }
    try:
        reference = _emit(sample, rust=False)
        if native.canonicalize(sample) == reference and DIGEST_PREFIX + str(
            native.canonical_hexdigest(sample)
        ) == sha256_digest(reference):
            return native
    except Exception:
        pass
    return None


_NATIVE = _native_module()

#: whether the C extension writes the canonical form (else the pure-Python paths, same bytes)
ACCELERATED = _NATIVE is not None


def canonicalize(value: Any) -> bytes:
    """The canonical UTF-8 bytes of a JSON value (see the module docstring for what is accepted)."""
    if _NATIVE is not None:
        out: bytes | None = _NATIVE.canonicalize(value)
        if out is not None:
            return out
    if _FAST_OK:
        out = emit_fast(value, format_number)
        if out is not None:
            return out
    return _emit(value, _RUST_OK)


def canonicalize_flat(fields: dict[str, str | int]) -> bytes:
    """``canonicalize(fields)`` for a flat object on a hot path (the hash chain's metadata).

    When the keys arrive already sorted and every key and string value is ASCII and every int
    safe, the object is already in canonical form and goes straight to the emitter; anything
    else takes the general path, so the bytes are always exactly ``canonicalize(fields)``.
    """
    if _RUST_OK:
        previous = ""
        for k, v in fields.items():
            if type(k) is not str or k <= previous or not k.isascii():
                break
            if type(v) is str:
                if not v.isascii():
                    break
            elif type(v) is not int or not -_MAX <= v <= _MAX:
                break
            previous = k
        else:
            return to_json(fields)
    return canonicalize(fields)


def canonical_hash(value: Any) -> str:
    """``sha256:<hex>`` of ``canonicalize(value)``."""
    if _NATIVE is not None:  # hashed where the extension wrote them: no bytes object made
        hexdigest: str | None = _NATIVE.canonical_hexdigest(value)
        if hexdigest is not None:
            return DIGEST_PREFIX + hexdigest
    return sha256_digest(canonicalize(value))


def normalize_json(value: Any) -> Any:
    """The value as canonicalize sees it: validated, strings and keys in NFC, dicts in canonical
    key order, tuples as lists, models dumped, integral floats within the safe range as ints."""
    return _walk(value, None)


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict | _Rejected:
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    seen: set[str] = set()
    for dup, _ in pairs:  # the first key seen twice
        if dup in seen:
            break
        seen.add(dup)
    return _Rejected(f"duplicate object key {dup!r}")


def _int_literal(text: str) -> int | float:
    """An integer literal beyond the safe range is refused (by the validating pass) unless it is
    exactly the canonical text of a double, as canonicalize writes 1e16 (10000000000000000):
    nothing is rounded then, and canonicalize_text(canonicalize(x)) == canonicalize(x) holds."""
    n = int(text)
    if -_MAX <= n <= _MAX:
        return n
    try:
        f = float(n)
    except OverflowError:
        return n
    return f if format_number(f) == text else n


def _load(text: bytes | str) -> Any:
    if isinstance(text, bytes | bytearray | memoryview):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CanonicalizationError(
                f"invalid UTF-8 at byte offset {e.start}: {e.reason}"
            ) from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_object_pairs,
            parse_constant=lambda name: _Rejected(f"{name} is not a JSON number"),
            parse_int=_int_literal,
        )
    except json.JSONDecodeError as e:
        raise CanonicalizationError(
            f"invalid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        ) from None
    except ValueError as e:  # e.g. an integer literal beyond Python's int-from-text digit limit
        raise CanonicalizationError(f"invalid JSON: {e}") from None
    except RecursionError:
        raise CanonicalizationError("JSON text is nested too deeply") from None


def parse_json(text: bytes | str) -> Any:
    """Strictly parse JSON text, refusing what has no canonical form (duplicate keys, NaN and
    Infinity, overflowing numbers, unsafe integers, invalid UTF-8, lone surrogates).

    Returns the value as written (strings not yet NFC-normalised; see ``normalize_json``)."""
    value = _load(text)
    _walk(value, None)
    return value


def canonicalize_text(text: bytes | str) -> bytes:
    """``canonicalize(parse_json(text))`` in one validating pass."""
    return canonicalize(_load(text))
