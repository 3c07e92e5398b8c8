"""Canonical JSON (RFC 8785 after NFC) and request hashing: models/canonical.py."""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import json
import math
import re
import struct
import unicodedata
from collections import OrderedDict
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from models import canonical
from models.canonical import (
    SAFE_INTEGER_MAX,
    canonical_hash,
    canonicalize,
    canonicalize_text,
    format_number,
    normalize_json,
    parse_json,
)
from models.digest import is_digest, sha256_digest
from models.errors import CanonicalizationError, InvalidInputError
from tests.testdata import unpacked_testdata

TESTDATA = unpacked_testdata() / "rfc8785"

# The two RFC 8785 reference vectors whose strings are not in NFC. Replaybook's rule (NFC before
# JCS) deliberately makes their canonical form differ from plain RFC 8785:
#   unicode: "A\u030a" (A + COMBINING RING ABOVE) -> "\u00c5"
#   weird:   key "\ufb33" (HEBREW LETTER DALET WITH DAGESH, a composition exclusion)
#            -> "\u05d3\u05bc", which also moves the key earlier in the UTF-16 order.
NFC_CHANGED_VECTORS = {"unicode", "weird"}
NFC_EXPECTED = {
    "unicode": '{"Unnormalized Unicode":"\u00c5"}'.encode(),
    "weird": (
        '{"\\n":"Newline","\\r":"Carriage Return","1":"One","</script>":"Browser Challenge",'
        '"\x80":"Control\x7f","\u00f6":"Latin Small Letter O With Diaeresis",'
        '"\u05d3\u05bc":"Hebrew Letter Dalet With Dagesh","\u20ac":"Euro Sign",'
        '"\U0001f602":"Smiley"}'
    ).encode(),
}


def _nfc_tree(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [_nfc_tree(v) for v in value]
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", k): _nfc_tree(v) for k, v in value.items()}
    return value


def _vectors() -> list[dict[str, Any]]:
    return json.loads((TESTDATA / "vectors.json").read_text())


# --- RFC 8785 reference vectors ------------------------------------------------------------------


@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["name"])
def test_rfc8785_vector(vector: dict[str, Any]) -> None:
    source = (TESTDATA / vector["input_file"]).read_bytes()
    expected = (TESTDATA / vector["expected_output_file"]).read_bytes()
    # the test data is what its manifest says (byte-exact, no trailing newline)
    assert expected.hex() == vector["expected_output_hex"]
    assert hashlib.sha256(expected).hexdigest() == vector["expected_output_sha256"]
    assert len(expected) == vector["expected_output_len"]
    assert rfc8785.dumps(json.loads(source)) == expected  # the reference package agrees with it

    ours = canonicalize_text(source)
    parsed = json.loads(source)
    assert (_nfc_tree(parsed) != parsed) == (vector["name"] in NFC_CHANGED_VECTORS)
    if vector["name"] in NFC_CHANGED_VECTORS:
        assert ours == NFC_EXPECTED[vector["name"]]
        assert ours == rfc8785.dumps(_nfc_tree(parsed))
    else:
        assert ours == expected
        assert canonical_hash(json.loads(source)) == "sha256:" + vector["expected_output_sha256"]
    assert canonicalize_text(ours) == ours


def test_rfc8785_vector_set_is_complete() -> None:
    names = {v["name"] for v in _vectors()}
    assert names == {"arrays", "french", "structures", "unicode", "values", "weird"}


# --- ES6 number serialisation ---------------------------------------------------------------------


def _readme_digests() -> dict[int, str]:
    text = (TESTDATA / "README.txt").read_text()
    return {int(n): h for n, h in re.findall(r"^\s+(\d+)\s+([0-9a-f]{64})\s*$", text, re.M)}


def test_es6_numbers_10k() -> None:
    lines = (TESTDATA / "es6-numbers-10k.jsonl").read_text().splitlines()
    assert len(lines) == 10_000
    digest_text = []
    non_finite = 0
    for line in lines:
        entry = json.loads(line)
        x = struct.unpack(">d", bytes.fromhex(entry["hex"].zfill(16)))[0]
        if not math.isfinite(x):  # the generator avoids them, but they must be refused
            non_finite += 1
            with pytest.raises(CanonicalizationError, match="not a finite double"):
                canonicalize(x)
            continue
        ours = canonicalize(x).decode()
        assert ours == entry["expected"], entry
        assert format_number(x) == ours
        assert canonicalize_text(ours).decode() == ours  # canonical text re-parses to itself
        digest_text.append(f"{entry['hex']},{ours}\n")
    assert non_finite == 0
    published = _readme_digests()
    for n in (1000, 10_000):
        got = hashlib.sha256("".join(digest_text[:n]).encode()).hexdigest()
        assert got == published[n], n


@pytest.mark.parametrize("bits", ["7ff0000000000000", "fff0000000000000", "7ff8000000000000"])
def test_non_finite_bit_patterns_are_refused(bits: str) -> None:
    x = struct.unpack(">d", bytes.fromhex(bits))[0]
    with pytest.raises(CanonicalizationError, match="not a finite double"):
        canonicalize({"x": [x]})


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.5, "-1.5"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (1e16, "10000000000000000"),
        (2.0**60, "1152921504606847000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (2.5e-6, "0.0000025"),
        (-9.99e-6, "-0.00000999"),
        (1.5e-5, "0.000015"),
        (0.1, "0.1"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (333333333.33333329, "333333333.3333333"),
        (3.3333333333333335e21, "3.3333333333333335e+21"),
    ],
)
def test_number_formatting(value: float, text: str) -> None:
    assert format_number(value) == text
    assert canonicalize(value) == text.encode()
    assert canonicalize([value, {"v": value}]) == f'[{text},{{"v":{text}}}]'.encode()


def test_one_one_point_zero_and_1e0_hash_the_same() -> None:
    digests = {canonical_hash(parse_json(t)) for t in ("1", "1.0", "1e0", "10e-1", "1.00")}
    digests |= {canonical_hash(1), canonical_hash(1.0)}
    assert len(digests) == 1


# --- key order and strings --------------------------------------------------------------------------


def test_keys_sorted_by_utf16_code_units() -> None:
    # U+E000 sorts before U+1F600 by code point but after it in UTF-16 (0xD83D < 0xE000)
    value = {"\ue000": 1, "\U0001f600": 2, "z": 3, "\u00e9": 4}
    assert canonicalize(value) == '{"z":3,"\u00e9":4,"\U0001f600":2,"\ue000":1}'.encode()
    assert sorted(value) != ["z", "\u00e9", "\U0001f600", "\ue000"]  # Python's order differs


def test_string_escaping() -> None:
    s = "".join(map(chr, range(0x20))) + '"\\/\x7f\u2028é😀'
    expected = (
        r'"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f'
        r"\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c"
        r"\u001d\u001e\u001f\"\\/" + '\x7f\u2028é😀"'
    ).encode()
    assert canonicalize(s) == expected
    assert canonicalize({s: s}) == b"{" + expected + b":" + expected + b"}"


def test_nfc_applies_to_strings_and_keys() -> None:
    nfd = {"cafe\u0301": ["A\u030a", {"n\u0303": "x"}]}
    nfc = {"caf\u00e9": ["\u00c5", {"\u00f1": "x"}]}
    assert canonicalize(nfd) == canonicalize(nfc)
    assert normalize_json(nfd) == nfc
    assert parse_json(json.dumps(nfd)) == nfd  # parsing keeps what was written


def test_placeholder_character_cannot_be_forged() -> None:
    # U+212B is what marks a float for reformatting; a string holding it is NFC'd to U+00C5 first
    value = {"a": "\u212b0", "b": 2.5e-6, "\u212b1": 1e17}
    assert (
        canonicalize(value) == '{"a":"\u00c50","b":0.0000025,"\u00c51":100000000000000000}'.encode()
    )


def test_ascii_and_mixed_documents_match_rfc8785() -> None:
    doc: Any = {
        "b": [1, 2.5, -0.0, True, None, "x\ny", {"é": "日本語", "a": []}],
        "a": {"z": 1e-7, "y": 1e16, "x": 123456.789, "w": -(2**53 - 1)},
        "😂": "smile",
    }
    assert canonicalize(doc) == rfc8785.dumps(doc)


# --- accepted Python types --------------------------------------------------------------------------


class Color(str, enum.Enum):  # noqa: UP042 - the mixin form, whose str() is "Color.RED"
    RED = "red"


class Shape(enum.StrEnum):
    ROUND = "round"


class Level(enum.IntEnum):
    HIGH = 3


class Call(BaseModel):
    tool: str
    args: dict[str, Any]
    when: datetime.datetime
    weight: float = 1.0


def test_subclasses_tuples_and_models() -> None:
    value = {"c": Color.RED, "l": Level.HIGH, Shape.ROUND: [Shape.ROUND]}
    assert canonicalize(value) == b'{"c":"red","l":3,"round":["round"]}'
    assert normalize_json(value) == {"c": "red", "l": 3, "round": ["round"]}
    assert canonicalize(OrderedDict([("b", 1), ("a", (1, 2))])) == b'{"a":[1,2],"b":1}'
    assert normalize_json({"t": (1, 2.0)}) == {"t": [1, 2]}
    call = Call(tool="search", args={"q": "x", "n": 3}, when=datetime.datetime(2024, 5, 1, 12))
    dumped = call.model_dump(mode="json")
    assert canonicalize(call) == canonicalize(dumped)
    assert canonicalize({"calls": [call]}) == canonicalize({"calls": [dumped]})
    assert canonical_hash(call) == sha256_digest(canonicalize(dumped))
    assert b'"when":"2024-05-01T12:00:00"' in canonicalize(call)


def test_bool_is_not_an_int() -> None:
    assert canonicalize([True, False, 1, 0]) == b"[true,false,1,0]"
    assert canonical_hash(True) != canonical_hash(1)


def test_canonical_hash_form() -> None:
    digest = canonical_hash({"a": 1})
    assert is_digest(digest)
    assert digest == "sha256:" + hashlib.sha256(b'{"a":1}').hexdigest()


def test_normalize_json_is_stable_and_canonical() -> None:
    value = {"b": 1.0, "a": [2.5, 1e17, "A\u030a"], "c": {"y": None, "x": False}}
    normalized = normalize_json(value)
    assert normalized == {"a": [2.5, 1e17, "\u00c5"], "b": 1, "c": {"x": False, "y": None}}
    assert list(normalized) == ["a", "b", "c"]
    assert type(normalized["b"]) is int
    assert type(normalized["a"][1]) is float  # integral but beyond 2**53: stays a double
    assert normalize_json(normalized) == normalized
    assert canonicalize(normalized) == canonicalize(value)


# --- refusals ---------------------------------------------------------------------------------


def _refused(value: Any, problem: str, path: str = "$") -> CanonicalizationError:
    with pytest.raises(CanonicalizationError) as info:
        canonicalize(value)
    err = info.value
    assert isinstance(err, InvalidInputError)
    assert problem in err.reason, err.reason
    assert err.path == path
    assert str(err).endswith(f" at {path}")
    return err


@pytest.mark.parametrize(
    ("value", "problem", "path"),
    [
        (float("nan"), "not a finite double", "$"),
        ({"a": [1, {"b": float("inf")}]}, "not a finite double", "$.a[1].b"),
        ([-math.inf], "not a finite double", "$[0]"),
        (2**53, "outside the safe range", "$"),
        ({"ids": [1, -(2**53)]}, "integer -9007199254740992 is outside the safe range", "$.ids[1]"),
        ({"k": 10**400}, "integer of 1329 bits is outside the safe range", "$.k"),
        ({"x": {"s": "ok\ud800"}}, "lone surrogate U+D800 in string", "$.x.s"),
        ({"x": {"\udfff": 1}}, "lone surrogate U+DFFF in object key", "$.x"),
        ({"a": {"A\u030a": 1, "\u00c5": 2}}, "duplicate object key 'Å' after Unicode NFC", "$.a"),
        ({"a": {1: "x"}}, "object key 1 (int) is not a string", "$.a"),
        ({True: 1}, "object key True (bool) is not a string", "$"),
        ({"a": {None: 1, "b": 2}}, "object key None (NoneType) is not a string", "$.a"),
        ({"b": b"bytes"}, "unsupported type bytes", "$.b"),
        ({"s": {1, 2}}, "unsupported type set", "$.s"),
        ([datetime.date(2024, 1, 1)], "unsupported type datetime.date", "$[0]"),
        ([0, decimal.Decimal("1.5")], "unsupported type decimal.Decimal", "$[1]"),
        ({"o": object()}, "unsupported type object", "$.o"),
        ({"weird key": [[1, 2, float("nan")]]}, "not a finite double", '$["weird key"][0][2]'),
    ],
)
def test_refusals(value: Any, problem: str, path: str) -> None:
    _refused(value, problem, path)
    with pytest.raises(CanonicalizationError):
        normalize_json(value)
    with pytest.raises(CanonicalizationError):
        canonical_hash(value)


def test_cycles_and_deep_nesting_are_refused() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    _refused(cyclic, "nested too deeply or contains a cycle")
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    _refused(deep, "nested too deeply")
    with pytest.raises(CanonicalizationError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000)


def test_nesting_beyond_the_rust_serialisers_depth_uses_the_fallback() -> None:
    deep: Any = {"v": [1.5, 2.5e-6, "é"]}
    for i in range(300):
        deep = {"n": deep, "i": i} if i % 2 else [deep, 0.25]
    assert canonicalize(deep) == rfc8785.dumps(deep)


@pytest.mark.parametrize(
    ("text", "problem", "path"),
    [
        ('{"a": 1, "a": 2}', "duplicate object key 'a'", "$"),
        ('{"x": [0, {"k": 1, "j": 2, "k": 3}]}', "duplicate object key 'k'", "$.x[1]"),
        (
            '{"a": {"\\u00c5": 1, "A\\u030a": 2}}',
            "duplicate object key 'Å' after Unicode NFC",
            "$.a",
        ),
        ("[NaN]", "NaN is not a JSON number", "$[0]"),
        ('{"v": Infinity}', "Infinity is not a JSON number", "$.v"),
        ('{"v": [-Infinity]}', "-Infinity is not a JSON number", "$.v[0]"),
        ('{"v": 1e400}', "not a finite double", "$.v"),
        ('{"v": -1E+999}', "not a finite double", "$.v"),
        ('{"id": 9007199254740993}', "integer 9007199254740993 is outside the safe range", "$.id"),
        ("[12345678901234567890]", "outside the safe range", "$[0]"),
        ("[-9007199254740993]", "outside the safe range", "$[0]"),
        ('{"s": "\\ud800"}', "lone surrogate U+D800 in string", "$.s"),
        ('{"s": "\\udc00\\ud800"}', "lone surrogate U+DC00", "$.s"),
        ('{"\\ud83d": 1}', "lone surrogate U+D83D in object key", "$"),
        ('"\ud800"', "lone surrogate U+D800", "$"),
    ],
)
def test_parse_refusals(text: str, problem: str, path: str) -> None:
    for parse in (parse_json, canonicalize_text):
        with pytest.raises(CanonicalizationError) as info:
            parse(text)
        assert problem in info.value.reason, info.value.reason
        assert info.value.path == path


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (b'{"a": "\xff"}', "invalid UTF-8 at byte offset 7"),
        (b'"\xed\xa0\x80"', "invalid UTF-8 at byte offset 1"),  # an encoded surrogate
        (
            '{"a": 1,}',
            "invalid JSON: Expecting property name enclosed in double quotes (line 1, column 9)",
        ),
        ('{"a": 1}\n[', "invalid JSON: Extra data (line 2, column 1)"),
        ("", "invalid JSON: Expecting value (line 1, column 1)"),
        ("[1, 2", "invalid JSON"),
        ("'single'", "invalid JSON"),
        ("\ufeff[1]", "invalid JSON"),
        ("[" + "1" * 5000 + "]", "invalid JSON"),  # beyond Python's int-from-text limit
    ],
)
def test_syntax_and_encoding_errors(text: str | bytes, problem: str) -> None:
    with pytest.raises(CanonicalizationError) as info:
        parse_json(text)
    assert problem in info.value.reason, info.value.reason


def test_parse_accepts_canonical_big_doubles_only() -> None:
    # canonicalize writes 1e16 as 10000000000000000; reading that back must work (idempotence),
    # while an integer literal that a double would round stays refused.
    assert parse_json("10000000000000000") == 1e16
    assert parse_json("-9007199254740992") == -(2.0**53)  # exactly a double's canonical text
    assert canonicalize_text("[-10000000000000000]") == b"[-10000000000000000]"
    assert canonicalize_text("[1152921504606847000]") == b"[1152921504606847000]"
    with pytest.raises(CanonicalizationError, match="outside the safe range"):
        parse_json("1152921504606846976")  # 2**60 exactly, but not its canonical text
    assert parse_json('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert parse_json(b" [1] ") == [1]


# --- the stdlib fallback emitter gives the same bytes --------------------------------------------


def test_stdlib_fallback_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {
        "floats": [0.1, 1.0, -0.0, 1e16, 2.5e-6, 1e-7, 1e21, 5e-324, 123.456],
        "s": '\x00\x1f"\\/\x7fé😀\u212b',
        "k": {"\U0001f600": 1, "\ue000": 2},
    }
    fast = canonicalize(doc)
    monkeypatch.setattr(canonical, "_RUST_OK", False)
    assert canonicalize(doc) == fast == rfc8785.dumps(_nfc_tree(doc))
    for vector in _vectors():
        source = (TESTDATA / vector["input_file"]).read_bytes()
        assert canonicalize_text(source) == rfc8785.dumps(_nfc_tree(json.loads(source)))


def test_rust_serialiser_self_check_passes() -> None:
    # if pydantic-core ever formats differently, the module falls back (slower, same bytes);
    # this test tells us that happened.
    assert canonical._RUST_OK


# --- properties -------------------------------------------------------------------------------

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
safe_ints = st.integers(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | safe_ints | finite_floats | st.text(max_size=12)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
nfc_text = st.text(max_size=12).map(lambda s: unicodedata.normalize("NFC", s))
nfc_values = st.recursive(
    st.none() | st.booleans() | safe_ints | finite_floats | nfc_text,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(nfc_text, children, max_size=5)
    ),
    max_leaves=25,
)


def _map_strings(value: Any, fn: Any) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {fn(k): _map_strings(v, fn) for k, v in value.items()}
    return value


def _try_hash(value: Any) -> str | None:
    try:
        return canonical_hash(value)
    except CanonicalizationError:
        return None  # e.g. two keys equal after NFC


@SETTINGS
@given(st.dictionaries(st.text(max_size=6), json_values, min_size=2, max_size=8), st.randoms())
def test_key_order_does_not_matter(value: dict[str, Any], rnd: Any) -> None:
    items = list(value.items())
    rnd.shuffle(items)
    assert _try_hash(dict(items)) == _try_hash(value)


@SETTINGS
@given(json_values)
def test_nfc_and_nfd_hash_the_same(value: Any) -> None:
    nfd = _map_strings(value, lambda s: unicodedata.normalize("NFD", s))
    nfc = _map_strings(value, lambda s: unicodedata.normalize("NFC", s))
    assert _try_hash(nfd) == _try_hash(nfc) == _try_hash(value)


@SETTINGS
@given(safe_ints)
def test_int_and_integral_float_texts_hash_the_same(n: int) -> None:
    texts = (str(n), f"{n}.0", f"{n}e0", f"{n}.000E+0")
    assert len({canonicalize_text(t) for t in texts}) == 1
    assert canonical_hash(n) == canonical_hash(float(n)) == canonical_hash(parse_json(texts[1]))


@SETTINGS
@given(json_values)
def test_parse_then_canonicalize_is_idempotent(value: Any) -> None:
    try:
        once = canonicalize(value)
    except CanonicalizationError:
        assume(False)
    assert canonicalize_text(once) == once
    assert canonicalize(parse_json(once)) == once
    assert canonicalize(normalize_json(value)) == once


@settings(max_examples=300, deadline=None)
@given(nfc_values)
def test_matches_rfc8785_package(value: Any) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)
