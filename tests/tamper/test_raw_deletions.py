"""Tamper scenarios on raw-payload rows (issue 31): a forged deletion (ciphertext set to NULL
under an invented request) and a deleted raw row. ``runs verify`` names the place, a consumer
refuses the run, and a raw read refuses instead of showing the sanitized payload as raw. A
real deletion, chained in the audit log, still verifies."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from models import ExecutionEventType, RunRecord
from models.canonical import canonicalize
from models.errors import ChainBrokenError, ContentDestroyedError, IntegrityError
from models.redaction import REDACT_V1, redaction_policy
from runtime.privacy.service import PrivacyService
from runtime.privacy.views import evidence_view
from runtime.verification import require_verified
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from tests.tamper.conftest import T0, Recorded

E = ExecutionEventType
KEK = LocalKeyEncryptionKey(os.urandom(32))
MESSAGES = ["write to ada@example.com", "call +1 415 555 0100", "no personal data here"]


@dataclass
class Vaulted:
    rec: Recorded
    privacy: PrivacyService
    subject: str


@pytest.fixture
async def vaulted(database: Database, tmp_path: Path) -> Vaulted:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, KEK)
    ledger = SqlLedger(database, artifacts, vault=vault, group_commit=False)
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
    evidence = SqlEvidenceReader(database)
    privacy = PrivacyService(ledger, evidence, artifacts, vault, SqlPrivacyRecords(database))
    rec = Recorded(ledger, artifacts, None, database, run_id, "", "", "", "", len(MESSAGES))  # type: ignore[arg-type]
    assert (await ledger.verify(run_id)).intact
    return Vaulted(rec, privacy, subject)


async def _refused(v: Vaulted, sequence: int, words: str) -> None:
    """verify names ``sequence``; a consumer and a raw read both refuse."""
    result = await v.rec.ledger.verify(v.rec.run_id)
    assert not result.intact
    assert [(p.sequence, p.kind) for p in result.problems] == [(sequence, "raw_payloads")]
    assert words in result.problems[0].message, result.problems[0].message
    with pytest.raises(ChainBrokenError):
        await require_verified(v.rec.ledger, v.rec.run_id, to="replay")
    with pytest.raises(IntegrityError, match=f"#{sequence}"):
        await evidence_view(
            v.rec.ledger, v.privacy, v.rec.run_id, sequence, raw=True, actor="a", reason="r"
        )


async def test_forge_a_deletion(vaulted: Vaulted) -> None:
    await vaulted.rec.sql(
        "UPDATE raw_payloads SET ciphertext=NULL, destroyed_at=:at, "
        "destroyed_by_request='DSR-invented' WHERE run_id=:r AND sequence=1",
        r=vaulted.rec.run_id,
        at=T0,
    )
    await _refused(vaulted, 1, "forged deletion")


async def test_delete_a_raw_row(vaulted: Vaulted) -> None:
    await vaulted.rec.sql(
        "DELETE FROM raw_payloads WHERE run_id=:r AND sequence=2", r=vaulted.rec.run_id
    )
    await _refused(vaulted, 2, "raw-payload row deleted")


async def test_a_real_deletion_verifies_and_a_forged_one_beside_it_does_not(
    vaulted: Vaulted,
) -> None:
    receipt = await vaulted.privacy.delete_subject(vaulted.subject, "DSR-1", by="dpo")
    assert receipt.raw_payloads_destroyed == 2 and receipt.data_keys_destroyed == 1
    assert (await vaulted.rec.ledger.verify(vaulted.rec.run_id)).intact
    with pytest.raises(ContentDestroyedError, match="DSR-1"):
        await vaulted.privacy.read_raw_evidence(vaulted.rec.run_id, 1, actor="a", reason="r")
    # the unredacted row claimed by the same real request: more rows than it destroyed
    await vaulted.rec.sql(
        "UPDATE raw_payloads SET destroyed_at=(SELECT destroyed_at FROM raw_payloads "
        "WHERE run_id=:r AND sequence=1), destroyed_by_request='DSR-1' "
        "WHERE run_id=:r AND sequence=3",
        r=vaulted.rec.run_id,
    )
    result = await vaulted.rec.ledger.verify(vaulted.rec.run_id)
    assert not result.intact and "the audit chain records 2" in result.summary()


async def test_the_audit_record_of_a_deletion_is_chained(vaulted: Vaulted) -> None:
    await vaulted.privacy.delete_subject(vaulted.subject, "DSR-2", by="dpo")
    async with vaulted.rec.database.read() as conn:
        rows = (
            await conn.execute(
                text("SELECT record FROM privacy_audit WHERE run_id=:r"),
                {"r": vaulted.rec.run_id},
            )
        ).all()
    assert len(rows) == 1
    length, _, problems = await vaulted.privacy.records.verify_audit()
    assert length >= 1 and problems == []
