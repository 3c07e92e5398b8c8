"""The tamper suite, run header and governance rows (issue 31): the header's outcome, labels,
pins and environment manifest, a run's data subjects, its freezes and legal holds. On SQLite
and PostgreSQL; each attack must break ``verify`` naming the place (so ``runs verify`` exits 1
and a replay refuses to start), and a deletion must still see the subject and the hold."""

from __future__ import annotations

import dataclasses
import json
import os
import types
from datetime import timedelta

import pytest

from models.chain import GENESIS_HASH, BreakReason, ChainRow, row_hash, verify_chain
from models.enums import EvidenceType
from models.errors import EvidenceLockedError
from models.freeze import FreezeRecord
from models.privacy import LegalHold, RunSubject, SubjectKind
from runtime.privacy.service import PrivacyService
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.incidents import SqlIncidentStore
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from tests.runtime.test_ingest import _ingest
from tests.tamper.conftest import T0, Recorded
from tests.tamper.test_tamper import broken

SUBJECT = "customer:C-1002"
ZERO = "sha256:" + "0" * 64


def privacy(rec: Recorded) -> PrivacyService:
    vault = SqlRawVault(rec.database, rec.artifacts, LocalKeyEncryptionKey(os.urandom(32)))
    records = SqlPrivacyRecords(rec.database, rec.anchors)
    return PrivacyService(
        rec.ledger, SqlEvidenceReader(rec.database), rec.artifacts, vault, records
    )


# the run header --------------------------------------------------------------------------------


async def test_rewrite_the_header_outcome(recorded: Recorded) -> None:
    header = (await recorded.ledger.get_run(recorded.run_id)).model_dump(mode="json")
    await _set_header(recorded, header | {"outcome": "resolved"})
    summary = await broken(recorded)
    assert "run header outcome resolved disagrees with the chained RUN_COMPLETED" in summary


@pytest.mark.parametrize(
    "path, value",
    [
        (("labels", "subject"), "customer:C-9999"),
        (("environment",), {"python_version": "3.99"}),
    ],
    ids=["subject-label", "environment-manifest"],
)
async def test_rewrite_the_header_as_created(
    recorded: Recorded, path: tuple[str, ...], value: object
) -> None:
    header = (await recorded.ledger.get_run(recorded.run_id)).model_dump(mode="json")
    node = header
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    await _set_header(recorded, header)
    summary = await broken(recorded)
    assert summary.startswith("broken at sequence 1: run header rewritten"), summary


async def test_rewrite_an_ingested_run_header(recorded: Recorded) -> None:
    """An ingested run's header is chained like a recorded one's (its labels and outcome)."""
    rec = types.SimpleNamespace(
        ledger=recorded.ledger,
        artifacts=recorded.artifacts,
        evidence=SqlEvidenceReader(recorded.database),
    )
    run_id = f"ingested-{recorded.run_id}"
    await _ingest(rec, run_id)
    assert (await recorded.ledger.verify(run_id)).header_chained is True
    header = (await recorded.ledger.get_run(run_id)).model_dump(mode="json")
    await _set_header(recorded, header | {"outcome": {"ended_by": "agent"}}, run_id)
    assert "run header outcome" in await broken(recorded, run_id)
    await _set_header(recorded, header | {"labels": {"agent": "other"}}, run_id)
    assert (await broken(recorded, run_id)).startswith("broken at sequence 1: run header")


def test_a_run_recorded_before_header_chaining_verifies_flagged() -> None:
    """Its first event links to GENESIS_HASH: intact, its header reported not chained."""
    rows, previous = [], GENESIS_HASH
    for sequence in (1, 2):
        row = ChainRow(
            "r", sequence, f"e{sequence}", "s", "MODEL_CALL", "inline", ZERO, previous, "", T0, T0
        )
        previous = row_hash(row, previous)
        rows.append(dataclasses.replace(row, hash=previous))
    header = "sha256:" + "1" * 64  # what header_genesis gives for its stored header
    result = verify_chain("r", rows, expected_head=(2, previous), genesis=header)
    assert result.intact and result.header_chained is False
    assert result.report()["header"].startswith("not chained")
    forged = [dataclasses.replace(rows[0], previous_hash="sha256:" + "2" * 64), rows[1]]
    result = verify_chain("r", forged, genesis=header)
    assert result.reason is BreakReason.HEADER and result.broken_at == 1


# data subjects, freezes, legal holds --------------------------------------------------------------


async def test_delete_a_run_subjects_row(recorded: Recorded) -> None:
    person = RunSubject(subject_id=SUBJECT, kind=SubjectKind.PERSON, source="provider:crm.search")
    service = privacy(recorded)
    await service.vault.add_subjects(recorded.run_id, [person])
    assert (await recorded.ledger.verify(recorded.run_id)).intact
    await recorded.sql("DELETE FROM run_subjects WHERE run_id=:r", r=recorded.run_id)
    summary = await broken(recorded)
    assert f"data subject {SUBJECT} (governance log entry" in summary, summary
    # the person's deletion still reaches the run
    assert recorded.run_id in await service.vault.runs_of_subject(SUBJECT)


@pytest.mark.parametrize("what", ["legal_holds", "evidence_freezes"])
async def test_delete_a_hold_row(recorded: Recorded, what: str) -> None:
    service = privacy(recorded)
    person = RunSubject(subject_id=SUBJECT, kind=SubjectKind.PERSON, source="provider:crm.search")
    await service.vault.add_subjects(recorded.run_id, [person])
    if what == "legal_holds":
        await service.records.place_hold(
            LegalHold(
                hold_id="hold-1",
                run_id=recorded.run_id,
                reason="litigation",
                placed_by="counsel",
                placed_at=T0,
            )
        )
        place = "legal hold hold-1"
    else:
        head = await recorded.ledger.verify(recorded.run_id)
        await SqlIncidentStore(recorded.database).record_freeze(
            FreezeRecord(
                freeze_id="fr-1",
                incident_id="inc-1",
                run_id=recorded.run_id,
                types=(EvidenceType.EVENT,),
                retention_until=T0 + timedelta(days=90),
                chain_head_sequence=head.head_sequence,
                chain_head_hash=head.head_hash,
                enforced_by_backend=False,
                created_at=T0,
            )
        )
        place = "freeze fr-1"
    assert (await recorded.ledger.verify(recorded.run_id)).intact
    await recorded.sql(f"DELETE FROM {what} WHERE run_id=:r", r=recorded.run_id)
    summary = await broken(recorded)
    assert f"{place} (governance log entry" in summary and "no chained release" in summary
    # the hold did not lift: the deletion is refused, nothing destroyed
    with pytest.raises(EvidenceLockedError, match=place.split()[-1]):
        await service.delete_subject(SUBJECT, "req-1")
    if what == "legal_holds":  # a chained release (who, when, why) lifts it
        await service.release(recorded.run_id, by="counsel", reason="case closed")
        assert not await service.hold_reasons(recorded.run_id)


async def test_delete_the_newest_governance_entry_too(recorded: Recorded) -> None:
    """The hold row and its chained entry deleted: the anchored log head disagrees."""
    service = privacy(recorded)
    await service.records.place_hold(
        LegalHold(
            hold_id="hold-2",
            run_id=recorded.run_id,
            reason="audit",
            placed_by="counsel",
            placed_at=T0,
        )
    )
    await recorded.sql("DELETE FROM legal_holds WHERE run_id=:r", r=recorded.run_id)
    await recorded.sql("DELETE FROM governance_log WHERE run_id=:r", r=recorded.run_id)
    reasons = await service.hold_reasons(recorded.run_id)
    assert reasons and "governance log does not verify" in reasons[0], reasons


async def _set_header(rec: Recorded, header: dict[str, object], run_id: str = "") -> None:
    cast = "CAST(:v AS JSONB)" if rec.database.is_postgresql else ":v"
    await rec.sql(
        f"UPDATE runs SET record = {cast} WHERE run_id=:r",
        v=json.dumps(header),
        r=run_id or rec.run_id,
    )
