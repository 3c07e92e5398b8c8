"""Composition of the stores from settings (the one place that connects to anything)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from runtime.ports import ArtifactStore
from runtime.privacy.service import PrivacyService
from stores.artifacts import S3ArtifactStore, open_artifact_store
from stores.encryption import load_kek
from stores.sql.database import Database, open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from worker.settings import Settings


@dataclass
class Stores:
    db: Database
    artifacts: ArtifactStore
    ledger: SqlLedger
    evidence: SqlEvidenceReader
    #: raw evidence (encrypted) and privacy records, see runtime/privacy/service.py
    privacy: PrivacyService | None = None


@contextlib.asynccontextmanager
async def open_stores(settings: Settings) -> AsyncIterator[Stores]:
    artifacts = open_artifact_store(
        settings.artifacts,
        s3_endpoint_url=settings.s3_endpoint_url,
        s3_access_key=settings.s3_access_key,
        s3_secret_key=settings.s3_secret_key,
    )
    if isinstance(artifacts, S3ArtifactStore):
        # a new bucket gets Object Lock so that holds are enforced by the store itself
        await artifacts.ensure_bucket(object_lock=True)
    db = await open_database(settings.database_url)
    try:
        # the KEK is loaded from the environment (or the dev key file under REPLAYBOOK_HOME)
        # only when a raw payload is sealed or opened
        vault = SqlRawVault(db, artifacts, lambda: load_kek(home=settings.home))
        ledger = SqlLedger(db, artifacts, vault=vault)
        evidence = SqlEvidenceReader(db)
        yield Stores(
            db=db,
            artifacts=artifacts,
            ledger=ledger,
            evidence=evidence,
            privacy=PrivacyService(ledger, evidence, artifacts, vault, SqlPrivacyRecords(db)),
        )
    finally:
        await db.dispose()


async def require_run(settings: Settings, run_id: str) -> None:
    """Refuse an unknown run id (``RunNotFoundError`` naming it) before anything is started."""
    async with open_stores(settings) as stores:
        await stores.ledger.get_run(run_id)
