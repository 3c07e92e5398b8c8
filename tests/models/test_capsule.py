"""The capsule format alone (no store): packing is deterministic, and each check names itself
when it fails — the signature for any changed byte, the key for a capsule signed by another."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.capsules import open_capsule
from models.capsule import SIGNATURE_LENGTH, pack_unsigned, signature_line, with_signature
from models.errors import CapsuleRefusedError
from models.regression import ForbiddenSideEffect, RegressionCase
from stores.case_signing import public_key_id, public_raw

CASE = RegressionCase(
    case_id="case-1",
    incident_id="INC-1",
    source_run_id="run-1",
    created_at=datetime(2026, 12, 2, tzinfo=UTC),
    assertions=(ForbiddenSideEffect(capability_id="email.send"),),
)


def _capsule(key: Ed25519PrivateKey) -> bytes:
    fields = {
        "case_id": "case-1",
        "incident_id": "INC-1",
        "source_run_id": "run-1",
        "graph_id": "support-desk",
        "exported_at": datetime(2026, 12, 2, tzinfo=UTC),
        "public_key": base64.b64encode(public_raw(key.public_key())).decode(),
        "key_id": public_key_id(key.public_key()),
        "chain_heads": [{"run_id": "run-1", "sequence": 3, "hash": "sha256:" + "0" * 64}],
    }
    files = {"rows/runs.json": b"[]", "artifacts/" + "a" * 64: b"x" * 100}
    unsigned, manifest = pack_unsigned(fields, CASE, files)
    again, _ = pack_unsigned(fields, CASE, files)
    assert again == unsigned  # the same content packs to the same bytes
    signed = unsigned[:-SIGNATURE_LENGTH]
    return with_signature(unsigned, signature_line(manifest.key_id, key.sign(signed)))


def test_a_capsule_opens_with_its_key_and_without_one() -> None:
    key = Ed25519PrivateKey.generate()
    data = _capsule(key)
    given = open_capsule(data, key.public_key())
    assert given.trust == "given" and given.case == CASE
    assert open_capsule(data).trust == "embedded"


@pytest.mark.parametrize("where", [0, 40, 200, -SIGNATURE_LENGTH - 5, -30, -1])
def test_one_changed_byte_is_refused_by_the_signature(where: int) -> None:
    key = Ed25519PrivateKey.generate()
    data = bytearray(_capsule(key))
    data[where] ^= 0x01
    with pytest.raises(CapsuleRefusedError) as refused:
        open_capsule(bytes(data), key.public_key())
    assert refused.value.check == "signature"


def test_another_key_and_a_short_file_are_named() -> None:
    data = _capsule(Ed25519PrivateKey.generate())
    with pytest.raises(CapsuleRefusedError, match="not with the given key"):
        open_capsule(data, Ed25519PrivateKey.generate().public_key())
    with pytest.raises(CapsuleRefusedError) as short:
        open_capsule(b"PK" + b"0" * 10)
    assert short.value.check == "format"
