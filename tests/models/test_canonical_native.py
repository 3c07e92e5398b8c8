"""The C extension of the canonical form (``models/_canonical_native.c``) against the pure-Python
reference: the same bytes, or (through ``canonicalize``) the same refusal with the same path.

The 100,000-document differential against ``rfc8785`` (``test_canonical_vs_rfc8785.py``) runs
through the extension too, since ``canonicalize`` uses it; here: random documents of the tricky
kind, random doubles, and hostile inputs."""

from __future__ import annotations

import enum
import hashlib
import math
import random
import struct
from collections import OrderedDict
from typing import Any

import pytest

from models import canonical
from models.canonical import canonicalize, format_number
from models.errors import CanonicalizationError
from tests.models import test_canonical_fast as tricky

native = pytest.importorskip("models._canonical_native")


def _reference(value: Any) -> bytes | tuple[str, str | None]:
    try:
        return canonical._emit(value, rust=False)
    except CanonicalizationError as e:
        return (e.reason, e.path)


def _through_canonicalize(value: Any, monkeypatch: pytest.MonkeyPatch, on: bool) -> Any:
    with monkeypatch.context() as m:
        if not on:
            m.setattr(canonical, "_NATIVE", None)
        try:
            return canonicalize(value)
        except CanonicalizationError as e:
            return (e.reason, e.path)


def test_nesting_is_answered_as_deep_as_the_orjson_path_answered() -> None:
    assert native.canonicalize(_deep(254)) is not None
    assert native.canonicalize(_deep(255)) is None  # the reference answers (or refuses)


def test_the_extension_is_built_and_in_use() -> None:
    # make install compiles it (setup.py); a failed build would leave the slow paths in use
    assert canonical.ACCELERATED
    assert canonicalize({"b": [1.0, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'.encode()


def test_random_tricky_documents_give_the_reference_s_bytes() -> None:
    rng = random.Random(35)
    answered = 0
    for i in range(20_000):
        doc = tricky._value(rng)
        out = native.canonicalize(doc)
        if out is not None:
            answered += 1
            assert out == _reference(doc), (i, doc)
    assert answered > 12_000


def test_random_doubles_have_the_reference_s_text() -> None:
    rng = random.Random(754)
    values = [0.0, -0.0, 1e21, 1e-7, 5e-324, 2.0**53, 2.0**50 + 0.25, 1.7976931348623157e308]
    for _ in range(50_000):
        bits = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))[0]
        if math.isfinite(bits):
            values.append(bits)
        values.append(rng.gauss(0, 1))
        values.append(round(rng.random(), rng.randint(0, 8)))
        values.append(rng.randint(1, 10**6) / 10 ** rng.randint(0, 12))
        values.append(rng.uniform(1e-11, 1e-5))
    for x in values:
        assert native.number_text(x) == format_number(x), x
    with pytest.raises(ValueError):
        native.number_text(math.nan)


def test_numbers_at_the_digit_writers_edges_have_the_reference_s_text() -> None:
    # integers around each digit-count edge (1-3 digits apart, 8-digit groups, 16 digits at once)
    ints = [0, 2**53 - 1]
    for k in range(1, 17):
        ints += [10**k - 1, 10**k, 10**k + 1, 7 * 10 ** (k - 1)]
    for x in ints:
        for value in (x, -x, float(x), -float(x)):  # the ints above 2**53 - 1 are refused
            assert native.canonicalize(value) in (_reference(value), None), value
            assert native.canonicalize([float(value)]) == _reference([float(value)]), value
    # doubles with trailing zeros (stripped 16, 8, 4, 2 and 1 at a time), with 1 to 17 digits
    # on either side of the point, and in the exponent forms
    rng = random.Random(17)
    values = [10.0**e for e in range(-12, 22)] + [2.5e-7, 1.25e-6, 0.1, 0.2, 0.3, 123.456]
    for _ in range(20_000):
        digits = rng.randint(1, 10 ** rng.randint(1, 17))
        values.append(digits / 10 ** rng.randint(0, 20))
        values.append(digits * 10.0 ** rng.randint(-25, 25))
        values.append(float(f"{digits}e{rng.randint(-30, 22)}"))
    for y in values:
        assert native.number_text(y) == format_number(y), y
        assert native.number_text(-y) == format_number(-y), -y


def test_large_objects_sorted_by_radix_give_the_reference_s_bytes() -> None:
    # above 16 keys: radix sort on the first 8 bytes, keys of up to 16 bytes copied inline
    rng = random.Random(4096)
    alphabet = ["a", "b", "_", "0", "\x00", "\n", '"', "\\", "\x7f", "é", "\U0001f600", "\ue000"]
    for i in range(300):
        size = rng.choice((17, 40, 300))
        doc = {
            "".join(rng.choices(alphabet[: rng.choice((4, 9, 12))], k=rng.randint(0, 20))): j
            for j in range(size)
        }
        out = native.canonicalize(doc)
        assert out is not None or not all(k.isascii() for k in doc)
        if out is not None:
            assert out == _reference(doc), i
    # the sort packs each ASCII byte's 7 bits and sorts 10- and 9-bit digits of them: keys that
    # differ in one bit at each byte and digit edge, and feature-map keys (a word, a counter)
    edges = ["\x00", "\x01", "?", "@", "A", "_", "`", "a", "~", "\x7f"]
    for size in (17, 100, 2_000):
        doc = {"".join(rng.choices(edges, k=rng.randint(0, 10))): j for j in range(size)}
        doc.update({f"{rng.choice(('the', 'refu', 'a', 'weat'))}_{j:x}": j for j in range(size)})
        assert native.canonicalize(doc) == _reference(doc), size


class Text(enum.StrEnum):
    A = "a"


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for i in range(levels):
        value = [value] if i % 2 else {"k": value}
    return value


def _cycle() -> list[Any]:
    cyclic: list[Any] = []
    cyclic.append({"c": cyclic})
    return cyclic


HOSTILE: list[Any] = [
    "lone \ud800 surrogate",
    {"k": ["x" * 40 + "\udfff"]},
    {"\ud83d": 1},
    -0.0,
    [1e21, -1e21, 1e-7, 5e-324, -5e-324, 9.999999999999999e20, 2.0**53, 2.0**60],
    [2**53 - 1, -(2**53 - 1)],
    2**53,
    [-(2**53)],
    {"big": 10**400},
    math.nan,
    {"a": [1, {"b": -math.inf}]},
    {1: "x"},
    {None: 1, "b": 2},
    {("t",): 1},
    {Text.A: 1, "b": 2},
    {"a": Text.A},
    OrderedDict([("b", 1), ("a", 2)]),
    (1, (2.5, "x")),
    b"bytes",
    {"s": {1, 2}},
    {"A\u030a": 1, "\u00c5": 2},  # keys equal after NFC: refused
    {"A\u030a": ["A\u030a", "e\u0301" * 20, "\u212b"]},
    {"\U0001f600": 1, "\ue000": 2, "\uffff": 3, "\U00010000": 4, "z": 5, "é": 6},
    {f"shared_prefix_{i:05}": i for i in range(300)},
    {f"{chr(97 + i % 26)}{i}": i for i in range(2_000)},
    {"\x00": 1, "": 2, "\x00\x00": 3, "a\x00": 4, "a": 5},
    ['"\\\n\t\x00\x1f\x7f\u2028' * 9, "é" * 17 + '"', "日本" * 9 + "\n", "🙂" * 17 + "\\"],
    ["x" * 15 + '"', "y" * 16 + "\n", "z" * 17 + "\x01"],
    _deep(254),
    _deep(255),
    _deep(1_001),
    _deep(5_000),
    _cycle(),
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_inputs_give_the_same_bytes_or_the_same_refusal(
    value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = native.canonicalize(value)
    if out is not None:
        assert out == _reference(value)
        assert native.canonical_hexdigest(value) == hashlib.sha256(out).hexdigest()
    else:
        assert native.canonical_hexdigest(value) is None
    fast = _through_canonicalize(value, monkeypatch, on=True)
    slow = _through_canonicalize(value, monkeypatch, on=False)
    assert fast == slow


def test_canonical_hash_hashes_the_extension_s_bytes_where_they_were_written() -> None:
    rng = random.Random(256)
    for size in (0, 10, 5_000, 200_000):  # the kept buffer grows, and is written again
        doc = {"s": "é" * size, "n": [rng.random() for _ in range(size // 100)]}
        assert (
            canonical.canonical_hash(doc)
            == "sha256:" + hashlib.sha256(canonical._emit(doc, rust=False)).hexdigest()
        )


class _Attrs:
    def __init__(self) -> None:
        self.b = [1, {"x": 2.5}]
        self.a = "é"


def _tables() -> list[dict[Any, Any]]:
    """Dicts of every table kind the extension reads in place or through PyDict_Next."""
    with_holes = {f"k{i}": i for i in range(40)}
    for i in range(0, 40, 3):  # deleted entries: slots without a value
        del with_holes[f"k{i}"]
    general: dict[Any, Any] = {"b": 1, 7: "int key", "a": [2]}
    del general[7]  # str keys only, in a table that was made for any key
    small: dict[str, Any] = {"z": 1, "y": 2, "x": 3}
    del small["y"]
    small["w"] = {"v": small["z"]}
    split = _Attrs().__dict__  # an instance's dict (a split table on 3.11)
    return [with_holes, general, small, split, {"split": split, "holes": with_holes}, {}]


def test_every_dict_table_kind_gives_the_reference_s_bytes() -> None:
    # 3.11: entries are read in place (unicode and general tables), PyDict_Next otherwise
    for i, doc in enumerate(_tables()):
        reference = _reference(doc)
        assert isinstance(reference, bytes), i
        assert native.canonicalize(doc) == reference, i
        assert native.canonical_hexdigest(doc) == hashlib.sha256(reference).hexdigest(), i


def test_objects_with_the_same_keys_in_any_order_give_the_reference_s_bytes() -> None:
    # the key order of a small object is reused for the next one with the same key objects in
    # the same insertion order: the same keys in another order, one key changed, a key deleted
    rng = random.Random(8)
    names = [f"key{i}" for i in range(16)] + ["", "a", "b", "é"]
    docs: list[Any] = []
    for _ in range(3_000):
        pool = names[: rng.choice((3, 16, 20))]
        keys = rng.sample(pool, rng.randint(2, min(12, len(pool))))
        # half the time the previous object's keys, maybe shuffled or one of them changed
        if rng.random() < 0.5 and docs and len(docs[-1]) > 1:
            keys = list(docs[-1])
            if rng.random() < 0.3:
                rng.shuffle(keys)
            if rng.random() < 0.3:
                keys[rng.randrange(len(keys))] = rng.choice(names)
        doc = {k: rng.randint(0, 9) for k in keys}
        if rng.random() < 0.2:
            del doc[next(iter(doc))]  # a deleted entry first in the table
        docs.append(doc)
    assert native.canonicalize(docs) == _reference(docs)
    for start in range(0, 3_000, 100):  # and in calls of their own
        part = docs[start : start + 100]
        assert native.canonicalize(part) == _reference(part), start


def test_nested_keys_seen_before_they_are_written_give_the_reference_s_bytes() -> None:
    # inner objects' keys are cached while the outer ones are still unwritten
    doc: Any = {"name": "leaf"}
    for level in range(200):
        doc = {"level": level, "child": doc, "zz": [level, {"level": -level}]}
    assert native.canonicalize(doc) == _reference(doc)


def test_two_key_objects_in_either_order_give_the_reference_s_bytes() -> None:
    # a two-key object is ordered by one comparison: keys sharing their first 8 bytes, a key
    # that is the start of the other, the empty key, keys past ASCII (the general order)
    pairs = [
        ("role", "content"),
        ("abcdefgh", "abcdefgh1"),
        ("abcdefghA", "abcdefghB"),
        ("", "a"),
        ("a", "a\x00"),
        ("level", "child"),
        ("é", "e"),
        ("\ue000", "😀"),
    ]
    docs = [{a: 1, b: [2, {b: 3, a: 4}]} for a, b in pairs]
    docs += [{b: 1, a: 2} for a, b in pairs]
    for doc in docs:
        assert native.canonicalize(doc) == _reference(doc), doc
    assert native.canonicalize(docs) == _reference(docs)
