"""Privacy fixtures: the real ledger with a raw vault under a fixed test KEK, on both SQL
backends (and the local artifact directory; S3 tests take ``s3_artifact_store``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.support_desk.providers import SimulatedWorld
from runtime.privacy.service import PrivacyService
from stores.artifacts import LocalArtifactStore
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords

TEST_KEK = LocalKeyEncryptionKey(os.urandom(32))


@dataclass
class PrivacyStack:
    db: Database
    ledger: SqlLedger
    artifacts: object
    evidence: SqlEvidenceReader
    vault: SqlRawVault
    privacy: PrivacyService
    world: SimulatedWorld


async def make_stack(db: Database, artifacts: object) -> PrivacyStack:
    vault = SqlRawVault(db, artifacts, TEST_KEK)  # type: ignore[arg-type]
    ledger = SqlLedger(db, artifacts, vault=vault)  # type: ignore[arg-type]
    evidence = SqlEvidenceReader(db)
    world = SimulatedWorld(db)
    await world.ensure()
    service = PrivacyService(ledger, evidence, artifacts, vault, SqlPrivacyRecords(db))  # type: ignore[arg-type]
    return PrivacyStack(db, ledger, artifacts, evidence, vault, service, world)


@pytest.fixture
async def stack(database: Database, tmp_path: Path) -> PrivacyStack:
    return await make_stack(database, LocalArtifactStore(tmp_path / "artifacts"))
