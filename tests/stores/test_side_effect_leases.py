"""The lease sweep in a run that keeps raw forms apart (rule 17), on SQLite and PostgreSQL: the
UNKNOWN it records is a copy of the EXECUTING record's sanitized view (the sweeper never holds
the raw form), so its raw-payload row says so (raw = itself). Without that row, the copy's
pseudonyms read as a raw row somebody deleted: ``runs verify`` fails an untouched run, and a
raw read refuses it as tampered. The row deleted in SQL is read as the deletion it is."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from models import RunRecord, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash
from models.privacy import RawEvidenceState
from models.redaction import REDACT_V1, has_redaction_token, redaction_policy
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.database import Database
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.side_effect_leases import sweep_expired_side_effects

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
KEK = LocalKeyEncryptionKey(os.urandom(32))


async def test_a_swept_lease_in_a_redacted_run_carries_its_raw_row(
    database: Database, tmp_path: Path
) -> None:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    vault = SqlRawVault(database, artifacts, KEK)
    ledger = SqlLedger(database, artifacts, vault=vault, group_commit=False)
    run_id = f"lease-raw-{uuid.uuid4().hex[:12]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="support-desk", graph_version="1", created_at=T0)
    )
    recorder = RunRecorder(
        ledger,
        artifacts,
        run_id,
        redaction=redaction_policy(REDACT_V1, frozenset()),
        subject_id="customer:ada",
    )
    # a step named after the person it writes to: its sanitized view holds a pseudonym
    executing = SideEffectRecord(
        side_effect_id=f"se-{run_id}",
        run_id=run_id,
        step_id="reply to ada@example.com",
        capability_id="email.send",
        idempotency_key=f"idem-{run_id}",
        action_hash=canonical_hash({"to": "ada@example.com"}),
        status=SideEffectStatus.EXECUTING,
    )
    # what a process killed mid-write leaves: EXECUTING and nothing after it
    await SideEffectLedger(recorder)._transition(executing)
    assert (await ledger.verify(run_id)).intact

    later = ledger.clock() + timedelta(seconds=61)
    (swept,) = await sweep_expired_side_effects(ledger, 60, later, run_id=run_id)
    assert swept.status is SideEffectStatus.UNKNOWN
    (event, payload) = (await ledger.events_with_payloads(run_id))[-1]
    assert payload is not None and has_redaction_token(payload)  # the copy's pseudonym

    verification = await ledger.verify(run_id)
    assert verification.intact, verification.summary()
    assert verification.checked["raw_payloads"] == event.sequence  # every event has its row
    raw = await vault.raw_evidence(run_id, event.sequence, decrypt=False, for_raw_read=True)
    assert raw.state is RawEvidenceState.SAME_AS_SANITIZED  # read for what it is: no deletion
    assert raw.redaction_policy_version == REDACT_V1

    # the database's writer deletes the copy's raw row: read as the deletion it is
    async with database.transaction() as conn:
        await conn.execute(
            text("DELETE FROM raw_payloads WHERE run_id = :r AND sequence = :s"),
            {"r": run_id, "s": event.sequence},
        )
    broken = await ledger.verify(run_id)
    assert [(p.sequence, p.kind) for p in broken.problems] == [(event.sequence, "raw_payloads")]
    assert "raw-payload row deleted" in broken.problems[0].message
