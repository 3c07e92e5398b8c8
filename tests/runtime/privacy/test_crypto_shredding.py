"""Deleting a person is crypto-shredding: the keys of every run they are in are destroyed and
counted, and an attacker holding the KEK and the database files (SQLite file and WAL) after
``delete-subject`` recovers nothing of them (issue 31, item 3)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from examples.support_desk.spec import run_scenario
from models.errors import IntegrityError
from stores.artifacts import LocalArtifactStore
from stores.encryption import data_key_cipher, open_sealed
from stores.sql import schema
from stores.sql.privacy import associated_data, key_scope
from tests.runtime.privacy.conftest import TEST_KEK, PrivacyStack

#: Bob, the third party whose record the wrong-customer run read (his deletion destroyed no
#: key before per-run keys: the run's raw was sealed under the customer's key)
BOB = "customer:C-2001"
PLAINTEXTS = (b"bob@example.com", b"Bob Martin", b"+1-555-0199", b"carol@example.com")


async def _secrets(stack: PrivacyStack, run_id: str) -> tuple[list[bytes], list[tuple]]:
    """The run's wrapped data keys and sealed raw payloads, as the attacker copied them
    before the deletion (the bytes they will look for in the files afterwards)."""
    k, r = schema.data_keys.c, schema.raw_payloads.c
    async with stack.db.read() as conn:
        keys = await conn.execute(select(k.wrapped_key).where(k.subject_id == key_scope(run_id)))
        sealed = await conn.execute(
            select(r.ciphertext, r.raw_hash, r.sanitized_hash).where(
                r.run_id == run_id, r.ciphertext.is_not(None)
            )
        )
        return [bytes(w) for (w,) in keys.all()], [tuple(row) for row in sealed.all()]


async def test_delete_subject_destroys_the_runs_keys_and_nothing_is_recoverable(
    stack: PrivacyStack,
) -> None:
    artifacts = stack.artifacts
    assert isinstance(artifacts, LocalArtifactStore)
    run_id = (await run_scenario(stack.world, stack.ledger, artifacts, "wrong-customer")).run_id
    wrapped, sealed = await _secrets(stack, run_id)
    assert wrapped and sealed

    receipt = await stack.privacy.delete_subject(BOB, "DSR-bob", by="dpo")
    assert receipt.data_keys_destroyed >= 1 and receipt.raw_payloads_destroyed >= len(sealed)
    assert (await stack.ledger.verify(run_id)).intact

    # the attack: every data key still in the database, unwrapped with the KEK, tried on every
    # ciphertext of the person's run
    k = schema.data_keys.c
    async with stack.db.read() as conn:
        live = (
            await conn.execute(
                select(k.subject_id, k.wrapped_key).where(k.wrapped_key.is_not(None))
            )
        ).all()
    keys = [TEST_KEK.unwrap(bytes(w), scope) for scope, w in live]
    for ciphertext, raw_hash, sanitized_hash in sealed:
        for key in keys:
            try:
                open_sealed(
                    data_key_cipher(key),
                    ciphertext,
                    associated_data(run_id, raw_hash, sanitized_hash),
                )
            except IntegrityError:
                continue
            raise AssertionError("a raw payload of the deleted person opened")

    if stack.db.is_postgresql:  # only ciphertext is ever stored; its WAL is not ours to read
        return
    # the bytes of the SQLite file and its WAL: no plaintext of the person, and no 16-byte
    # piece of a destroyed wrapped key or ciphertext left to try with the KEK
    path = Path(stack.db.engine.url.database or "")
    files = [p for p in (path, Path(f"{path}-wal")) if p.exists()]
    blob = b"".join(p.read_bytes() for p in files)
    assert [v for v in PLAINTEXTS if v in blob] == []
    fragments = [
        s[i : i + 16]
        for s in [*wrapped, *(c for c, *_ in sealed)]
        for i in range(0, len(s) - 15, 8)
    ]
    assert [f for f in fragments if f in blob] == []
