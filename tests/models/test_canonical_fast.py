"""The native fast path of the canonical form (``models.canonical_fast``) against the validating
slow path and ``rfc8785``: the same bytes whenever it answers, and no answer (so the slow path
refuses, naming the path) for everything it cannot vouch for."""

from __future__ import annotations

import enum
import random
import struct
import unicodedata
import uuid
from typing import Any

import orjson
import pytest
import rfc8785

from models import canonical, canonical_fast
from models.canonical import canonicalize, canonicalize_text, format_number
from models.canonical_fast import emit_fast
from models.errors import CanonicalizationError

# doubles from every range where orjson's text differs from ES6's, and their neighbours
_SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 100.0, 1e15, 1e16, 1e17, 1e20, 1e21, 1e22, 2.0**53]
_SPECIAL_FLOATS += [2.0**70, 9.999999999999999e20, 1e-6, 5e-6, 9.99e-6, 1e-5, 1e-7, 5e-324]
_SPECIAL_FLOATS += [0.5, 123.0, 1.5e16, 3.7e-6, 1.7976931348623157e308]
# strings that look like the number tokens the fix-up rewrites, and escapes around quotes
_TRICKY_STRINGS = ["1.0", ":1.0,", '"1.0"', "\\", '\\"', '\\\\":1.0,"', ",1e+16]", "[5e-6}"]
_TRICKY_STRINGS += ["g\x7f\xf0", "é", "A\u030a", "\ue000", "\U0001f600", "\u212b", "ﬁ"]


def _float(rng: random.Random) -> float:
    if rng.random() < 0.5:
        return rng.choice(_SPECIAL_FLOATS) * rng.choice((1, -1))
    while True:
        x = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0]
        if x == x and abs(x) != float("inf"):
            return x


def _scalar(rng: random.Random, tricky: list[str] = _TRICKY_STRINGS) -> Any:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice(tricky)
    if kind == 1:
        return "".join(rng.choices([*tricky, "a", " ", "\n"], k=rng.randint(0, 5)))
    if kind < 4:
        return _float(rng)
    if kind == 4:
        return rng.randint(-(2**53 - 1), 2**53 - 1)
    return rng.choice([True, False, None, 0, -7])


def _value(rng: random.Random, depth: int = 0, tricky: list[str] = _TRICKY_STRINGS) -> Any:
    if depth >= 3 or rng.random() < 0.35:
        return _scalar(rng, tricky)
    size = rng.randint(0, 5)
    if rng.random() < 0.5:
        return [_value(rng, depth + 1, tricky) for _ in range(size)]
    keys = rng.choices([*tricky, "a", "b", "z", "1.0"], k=size)
    return {k: _value(rng, depth + 1, tricky) for k in keys}


def _nfc(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [_nfc(v) for v in value]
    if isinstance(value, dict):
        return {_nfc(k): _nfc(v) for k, v in value.items()}
    return value


def test_fast_path_is_byte_identical_to_the_slow_path_and_rfc8785() -> None:
    rng = random.Random(21)
    answered = 0
    for i in range(20_000):
        doc = _value(rng)
        try:
            slow = canonical._emit(doc, rust=False)
        except CanonicalizationError:  # keys colliding after NFC: the fast path must not answer
            assert emit_fast(doc, format_number) is None, (i, doc)
            continue
        fast = emit_fast(doc, format_number)
        if fast is not None:
            answered += 1
            assert fast == slow, (i, doc)
        assert canonicalize(doc) == slow, (i, doc)
        nfc = _nfc(doc)
        if len(str(nfc)) == len(str(doc)) and nfc == doc:
            assert slow == rfc8785.dumps(doc), (i, doc)
    assert answered > 10_000  # most documents take the fast path


def test_large_documents_memchr_hops_included_match_the_slow_path() -> None:
    # above 16 KB the searches hop from byte to byte before scanning: same answers
    rng = random.Random(35)
    nfc = [s for s in _TRICKY_STRINGS if s not in ("A\u030a", "\u212b", "\ue000", "ﬁ")]
    answered = 0
    for i in range(10):
        doc = [_value(rng, tricky=nfc) for _ in range(rng.choice((400, 1_000)))]
        fast = emit_fast(doc, format_number)
        assert fast == canonical._emit(doc, rust=False), i
        answered += fast is not None
    assert answered == 10


class Plain(enum.Enum):
    A = 1


class Text(enum.StrEnum):
    A = "a"


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        {"a": [1, {"b": float("-inf")}]},
        [1.5, float("inf")],
        Plain.A,
        {"e": Plain.A},
        [uuid.UUID(int=1)],
        {"f": orjson.Fragment(b'{"raw":1.0}')},
        {"k": Text.A},
        {Text.A: 1},
        {"n": "A\u030a"},
        {"\U0001f600": 1, "\ue000": 2},
        [2**53],
        {"b": b"x"},
        {"s": {1}},
    ],
)
def test_fast_path_declines_what_it_cannot_vouch_for(value: Any) -> None:
    assert emit_fast(value, format_number) is None


def test_refusals_and_accepted_oddities_are_unchanged() -> None:
    with pytest.raises(CanonicalizationError, match=r"not a finite double.* at \$\.a\[1\]\.b"):
        canonicalize({"a": [1, {"b": float("inf")}]})
    with pytest.raises(CanonicalizationError, match="unsupported type"):
        canonicalize({"e": Plain.A})
    with pytest.raises(CanonicalizationError, match="unsupported type"):
        canonicalize([uuid.UUID(int=1)])
    with pytest.raises(CanonicalizationError, match="unsupported type"):
        canonicalize({"f": orjson.Fragment(b"{}")})
    assert canonicalize({"k": Text.A, "t": (1, 2.0)}) == b'{"k":"a","t":[1,2]}'
    assert canonicalize({"\U0001f600": 1, "\ue000": 2}) == '{"😀":1,"\ue000":2}'.encode()
    assert canonicalize("A\u030a") == '"Å"'.encode()


def test_parsed_text_takes_the_fast_path_with_the_same_refusals() -> None:
    assert canonicalize_text(b'{"b":[1.0,1e16,5e-6,-0.0],"a":"x"}') == (
        b'{"a":"x","b":[1,10000000000000000,0.000005,0]}'
    )
    with pytest.raises(CanonicalizationError, match="duplicate object key 'a'"):
        canonicalize_text(b'{"a":1,"a":2}')
    with pytest.raises(CanonicalizationError, match="NaN is not a JSON number"):
        canonicalize_text(b'{"a":NaN}')


def test_fast_path_self_check_passes() -> None:
    # if orjson ever writes differently, the module falls back (slower, same bytes); this test
    # tells us that happened
    assert canonical._FAST_OK


@pytest.mark.parametrize(
    "text",
    [
        "\u0b47\u0b3e",  # two starters that compose (U+0B4B): U+0B3E is NFC_Quick_Check=Maybe
        "\u1100\u1161",  # Hangul L + V jamo compose to U+AC00
        "\uac00\u11a8",  # Hangul LV syllable + T jamo compose to U+AC01
        "e\u0301",  # a combining mark after an ASCII letter
        "\u0f73",  # combining class 0 but NFC_Quick_Check=No
        "\u212b",  # a singleton decomposition (ANGSTROM SIGN, NFC is U+00C5)
        "\u0061\u0323\u0302",  # marks that compose in the other order of their classes
    ],
)
def test_text_not_in_nfc_is_never_answered_by_the_fast_path(text: str) -> None:
    doc = {"a": [text, 1.0], text: "x"}
    fast = emit_fast(doc, format_number)
    assert fast is None or fast == canonical._emit(doc, rust=False)
    assert canonicalize(doc) == rfc8785.dumps(_nfc(doc))


def test_stable_characters_are_answered_without_the_whole_text_check() -> None:
    doc: Any = {"k": "café Zürich 日本語 €42 🙂 Ωmega", "n": [1.0, 2.5]}
    fast = emit_fast(doc, format_number)
    assert fast == rfc8785.dumps(doc)
    _, unsafe_bmp, astral = canonical_fast._unsafe()
    assert unsafe_bmp.search("éü日本語€Ω\u2028") is None
    assert canonical_fast._stable_astral("🙂", astral)
    assert not canonical_fast._stable_astral("\U0001d15e", astral)  # MUSICAL SYMBOL HALF NOTE


def test_the_table_of_unstable_characters_is_the_unicode_database_s() -> None:
    from models import canonical_unicode

    if canonical_unicode.UNIDATA_VERSION == unicodedata.unidata_version:
        assert canonical_unicode.unsafe_ranges() == canonical_fast.unsafe_ranges()


def test_a_megabyte_of_floats_takes_the_fast_path() -> None:
    # random doubles put byte patterns like a non-finite one's into marshal's census (a false
    # alarm the read-back settles); a real NaN among them is still refused
    rng = random.Random(754)
    doc: Any = {"rows": [[rng.gauss(0, 1) for _ in range(64)] for _ in range(1_000)]}
    assert emit_fast(doc, format_number) == rfc8785.dumps(doc)
    doc["rows"][500][7] = float("nan")
    assert emit_fast(doc, format_number) is None


def test_the_memchr_hops_answer_as_the_expression_does() -> None:
    rng = random.Random(6)
    pattern = canonical_fast._OTHER_ENDS[1]
    for _ in range(200):
        words = rng.choices(["-", "e-6", "e-6,", "x", "1e-6]", "-6,"], k=rng.randint(0, 40))
        data = b"a" * 16_384 + " ".join(words).encode()
        expected = pattern.search(data) is not None
        assert canonical_fast._found(data, b"-", pattern, hops=rng.randint(0, 3)) is expected


def test_characters_that_may_compose_with_the_one_before_are_known() -> None:
    # NFC_Quick_Check=Maybe with combining class 0 (Unicode's DerivedNormalizationProps)
    maybe = "\u09be\u09d7\u0b3e\u0b56\u0b57\u0bbe\u0bd7\u0cc2\u0cd5\u0cd6\u0d3e\u0d57\u0dcf"
    maybe += "\u0ddf\u102e\u1161\u1175\u11a8\u11c2\u1b35\U0001133e\U00011357"
    assert set(maybe) <= canonical_fast._composing()
    assert canonical_fast._unsafe()[1].search("\u0b3e")


@pytest.mark.parametrize(
    "doc",
    [
        {"s": "v1.0, then 2.0]", "n": [1.0, 2.0]},  # ".0," in a string: the careful path
        {"s": "x", "n": [-0.0, 0.0, -3.0]},  # -0.0 is written 0
        3.0,  # a bare number: ".0" at the end of the text
        -0.0,
        {"s": 'quote \\" and 1.0,', "t": ["\\", 4.0]},
        {"n": [1e16, 2e20, 5e-6, 1.0], "s": "e+16, e-6]"},
        {"deep": [[[{"x": 10.0}]]], "y": {"z": 1234567890123456.0}},
    ],
)
def test_integral_doubles_lose_their_point_zero_outside_strings_only(doc: Any) -> None:
    assert emit_fast(doc, format_number) == rfc8785.dumps(doc)
