"""A capsule of a run whose raw content was destroyed (privacy ``delete-subject``) carries the
audit chain's records of those deletions, so its reader tells a legitimate deletion from a
forged one: the capsule verifies and its run verifies in the store it is brought into (the
throw-away one of ``case run``, or a PostgreSQL store), while a capsule whose deletion record
was removed or invented is refused by the ``deletions`` check. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.capsule_deletions import DELETIONS_ENTRY
from app.capsule_run import capsule_store_settings
from app.capsules import OpenedCapsule, capsule_summary, export_case, import_capsule, open_capsule
from models import ExecutionEventType, RunRecord, RunStatus
from models.anchor import AUDIT_LOG_ID, audit_link
from models.canonical import canonicalize
from models.capsule import CASE_ENTRY, MANIFEST_ENTRY, pack_unsigned, signature_line
from models.capsule import with_signature as signed_with
from models.errors import CapsuleRefusedError
from models.privacy import RawDeletion
from models.redaction import REDACT_V1, redaction_policy
from models.regression import ExpectedOutcome, RegressionCase
from runtime.privacy.service import PrivacyService
from stores.artifacts import LocalArtifactStore
from stores.bundle import Stores, open_stores
from stores.case_signing import CaseSigningKey
from stores.config import DatabaseSettings
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from tests.fixtures_db import PG_ADMIN_URL
from tests.tamper.conftest import T0

E = ExecutionEventType
KEK = LocalKeyEncryptionKey(os.urandom(32))
KEY = CaseSigningKey(Ed25519PrivateKey.generate(), "test")
MESSAGES = ["write to ada@example.com", "call +1 415 555 0100", "no personal data here"]


@dataclass
class Exported:
    stores: Stores
    run_id: str
    data: bytes
    capsule: OpenedCapsule


@pytest.fixture
async def exported(database: Database, tmp_path: Path) -> Exported:
    """A redacted run of subject ``customer:…``, the subject deleted (DSR-1), its case
    exported as a capsule."""
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, KEK)
    ledger = SqlLedger(database, artifacts, vault=vault, group_commit=False)
    evidence = SqlEvidenceReader(database)
    stores = Stores(db=database, artifacts=artifacts, ledger=ledger, evidence=evidence)
    stores.privacy = PrivacyService(ledger, evidence, artifacts, vault, SqlPrivacyRecords(database))
    run_id, subject = f"run-{uuid.uuid4().hex[:12]}", f"customer:{uuid.uuid4().hex[:8]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="support-desk", graph_version="1", created_at=T0)
    )
    policy = redaction_policy(REDACT_V1, frozenset())
    for i, message in enumerate(MESSAGES):
        raw = {"message": message}
        await ledger.append(
            run_id,
            NewEvent(
                "chat",
                E.CONTEXT_SNAPSHOT if i else E.RUN_STARTED,
                T0 + timedelta(seconds=i),
                payload=policy.sanitize(raw),
                raw=canonicalize(raw),
                redaction_policy_version=REDACT_V1,
                subject_id=subject,
            ),
        )
    end: dict[str, Any] = {"outcome": "done"}
    await ledger.append(
        run_id,
        NewEvent(
            "end",
            E.RUN_COMPLETED,
            T0 + timedelta(seconds=len(MESSAGES)),
            payload=end,
            raw=canonicalize(end),
            redaction_policy_version=REDACT_V1,
        ),
    )
    await ledger.finish_run(run_id, RunStatus.COMPLETED, "done")
    case = RegressionCase(
        case_id=f"case-{uuid.uuid4().hex[:8]}",
        incident_id=f"INC-{uuid.uuid4().hex[:8]}",
        source_run_id=run_id,
        created_at=T0,
        assertions=(ExpectedOutcome(contains="done"),),
    )
    await stores.incidents.put_case(case)
    receipt = await stores.privacy.delete_subject(subject, f"DSR-{run_id}", by="dpo")
    assert receipt.raw_payloads_destroyed == 2
    assert (await ledger.verify(run_id)).intact
    data, _ = await export_case(stores, case.case_id, KEY)
    return Exported(stores, run_id, data, open_capsule(data, KEY.public))


@pytest.fixture
async def postgres_store(tmp_path: Path) -> AsyncIterator[Stores]:
    """A PostgreSQL store of its own (a capsule's run is brought into a store without it)."""
    url = await create_scratch_database(PG_ADMIN_URL, "rb_capsule")
    settings = capsule_store_settings(tmp_path / "pg-store").model_copy(
        update={"database": DatabaseSettings.model_validate({"url": url})}
    )
    try:
        async with open_stores(settings) as stores:
            yield stores
    finally:
        await drop_scratch_database(PG_ADMIN_URL, url)


async def test_a_capsule_of_a_run_with_a_deleted_subject_verifies(
    exported: Exported, tmp_path: Path
) -> None:
    capsule = exported.capsule
    (carried,) = capsule.deletions()
    assert carried["record"]["action"] == "raw_destroyed"
    assert capsule_summary(capsule, exported.data)["deletions"] == 1
    # the throw-away store case run brings it into (SQLite)
    async with open_stores(capsule_store_settings(tmp_path / "throw-away")) as throw_away:
        await _brought_in(throw_away, capsule)


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
async def test_a_capsule_with_a_deletion_is_imported_into_a_postgresql_store(
    exported: Exported, postgres_store: Stores
) -> None:
    """``case import`` into a PostgreSQL store: the deletion joins that store's audit chain."""
    await _brought_in(postgres_store, exported.capsule)


async def _brought_in(stores: Stores, capsule: OpenedCapsule) -> None:
    """The run goes in, verifies there (the chain check), its deletion in that audit chain."""
    run_id = await import_capsule(stores, capsule, with_case=False)
    verification = await stores.ledger.verify(run_id)
    assert verification.intact, verification.summary()
    assert verification.checked["raw_payloads"] == len(MESSAGES) + 1
    records = stores.privacy_records
    length, heads, problems = await records.verify_audit()
    assert length == 1 and problems == []
    assert stores.anchors is not None  # the audit chain's new head is anchored there
    anchored = await stores.anchors.latest(AUDIT_LOG_ID)
    assert anchored is not None and anchored.anchor.head == heads[-1]
    # the database's writer removes the deletion's record there: a forged deletion again
    await _sql(stores, "DELETE FROM privacy_audit WHERE run_id = :r", r=run_id)
    broken = await stores.ledger.verify(run_id)
    assert not broken.intact and "forged deletion" in broken.summary()


async def _sql(stores: Stores, statement: str, **params: Any) -> None:
    from sqlalchemy import text

    async with stores.db.transaction() as conn:
        await conn.execute(text(statement), params)


def _repacked(capsule: OpenedCapsule, change: Callable[[dict[str, bytes]], None]) -> bytes:
    """The capsule with its entries changed by ``change`` and signed again with its key (what
    its exporter, or a forger trusted by ``--public-key``-less reading, could make)."""
    files = {p: d for p, d in capsule.entries.items() if p not in (MANIFEST_ENTRY, CASE_ENTRY)}
    change(files)
    fields = capsule.manifest.model_dump(exclude={"entries"})
    unsigned, manifest = pack_unsigned(fields, capsule.case, files)
    signed_part = unsigned[: -len(signature_line(manifest.key_id, bytes(64)))]
    return signed_with(unsigned, signature_line(manifest.key_id, KEY.sign(signed_part)))


def _refused(data: bytes, words: str) -> None:
    with pytest.raises(CapsuleRefusedError) as refused:
        open_capsule(data, KEY.public)
    assert refused.value.check == "deletions"
    assert words in str(refused.value), str(refused.value)


async def test_a_capsule_whose_deletion_record_was_removed_is_refused(
    exported: Exported,
) -> None:
    def remove(files: dict[str, bytes]) -> None:
        files[DELETIONS_ENTRY] = b"[]"

    _refused(_repacked(exported.capsule, remove), "forged deletion")

    def drop_entry(files: dict[str, bytes]) -> None:
        del files[DELETIONS_ENTRY]

    _refused(_repacked(exported.capsule, drop_entry), "forged deletion")


async def test_a_capsule_with_an_invented_deletion_is_refused(exported: Exported) -> None:
    run_id = exported.run_id
    carried = json.loads(exported.capsule.entries[DELETIONS_ENTRY])
    rows = json.loads(exported.capsule.entries["rows/raw_payloads.json"])
    kept = next(r for r in rows if r["sequence"] == 3)  # the row the real request left alone
    assert kept["destroyed_by_request"] is None

    def invented(request: str, *, linked: bool) -> dict[str, Any]:
        """A deletion record of ``request`` at position 99 of the origin's chain; ``linked``:
        with the link a forger computes, else with the real record's."""
        record = dict(carried[0]["record"])
        deletion = RawDeletion(
            request_id=request, run_id=run_id, event_payloads=1, raw_payloads=1, data_keys=0
        )
        record.update(audit_id=f"audit-{request}", detail=deletion.model_dump_json())
        link = audit_link(carried[0]["hash"], 99, record) if linked else carried[0]["hash"]
        return {
            **carried[0],
            "audit_id": record["audit_id"],
            "record": record,
            "position": 99,
            "previous_hash": carried[0]["hash"],
            "hash": link,
        }

    def destroy_row_three(files: dict[str, bytes], request: str) -> None:
        changed = [
            {**r, "destroyed_by_request": request, "destroyed_at": carried[0]["record"]["at"]}
            if r["sequence"] == 3
            else r
            for r in rows
        ]
        files["rows/raw_payloads.json"] = json.dumps(changed).encode()

    # a row destroyed under an invented request whose record does not recompute to its link
    def unlinked(files: dict[str, bytes]) -> None:
        files[DELETIONS_ENTRY] = json.dumps(
            [*carried, invented("DSR-invented", linked=False)]
        ).encode()
        destroy_row_three(files, "DSR-invented")

    _refused(_repacked(exported.capsule, unlinked), "does not hash to its audit-chain link")

    # a well-linked invented record that no row of the capsule says it destroyed
    def unclaimed(files: dict[str, bytes]) -> None:
        files[DELETIONS_ENTRY] = json.dumps(
            [*carried, invented("DSR-unclaimed", linked=True)]
        ).encode()

    _refused(_repacked(exported.capsule, unclaimed), "invented deletion")

    # a row destroyed under an invented request the capsule carries no record of
    def unrecorded(files: dict[str, bytes]) -> None:
        destroy_row_three(files, "DSR-nobody")

    _refused(_repacked(exported.capsule, unrecorded), "forged deletion")


async def test_a_run_whose_deletion_record_was_removed_at_home_is_not_exported(
    exported: Exported,
) -> None:
    """The database's writer removes the deletion's audit record at the origin: the run no
    longer verifies there, and its capsule is refused before anything is signed."""
    from sqlalchemy import insert, select

    from stores.sql import schema

    stores, run_id = exported.stores, exported.run_id
    audit = schema.privacy_audit
    async with stores.db.read() as conn:
        kept = [
            dict(r._mapping)
            for r in await conn.execute(select(audit).where(audit.c.run_id == run_id))
        ]
    await _sql(stores, "DELETE FROM privacy_audit WHERE run_id = :r", r=run_id)
    try:
        with pytest.raises(CapsuleRefusedError) as refused:
            await export_case(stores, exported.capsule.case.case_id, KEY)
        assert refused.value.check == "chain" and "forged deletion" in str(refused.value)
    finally:  # the audit chain is shared by the session's other tests
        async with stores.db.transaction() as conn:
            await conn.execute(insert(audit), kept)
