"""Composition of the stores from their settings (the one place that connects to anything)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import cached_property

from models import SideEffectRecord
from runtime.ports import ArtifactStore
from runtime.privacy.service import PrivacyService
from stores.anchor_signing import load_anchor_keys
from stores.anchors import AnchorLog, S3Access, anchor_log_at
from stores.artifacts import S3ArtifactStore, open_artifact_store
from stores.config import StoreSettings
from stores.encryption import load_kek
from stores.sql.alert_fingerprints import SqlAlertFingerprints
from stores.sql.database import UNAVAILABLE_ERRORS as UNAVAILABLE_ERRORS
from stores.sql.database import Database, open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.incidents import SqlIncidentStore
from stores.sql.ledger import SqlLedger
from stores.sql.otlp_spans import SqlOtlpSpans
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from stores.sql.side_effect_leases import sweep_expired_side_effects
from stores.sql.slo_queries import SqlSloFacts
from stores.sql.views import SqlRunViews


@dataclass
class Stores:
    db: Database
    artifacts: ArtifactStore
    ledger: SqlLedger
    evidence: SqlEvidenceReader
    #: raw evidence (encrypted) and privacy records, see runtime/privacy/service.py
    privacy: PrivacyService | None = None
    #: run heads anchored outside the database, apart from the artifacts, signed (None:
    #: ``REPLAYBOOK_ANCHORS=off``)
    anchors: AnchorLog | None = None
    #: seconds a side effect may stay EXECUTING before a sweep marks it UNKNOWN
    side_effect_lease_seconds: float = 60.0
    #: the side effects whose lease had expired when the stores opened (now UNKNOWN)
    swept: list[SideEffectRecord] = field(default_factory=list)
    #: the OTLP receiver's staging tables (``POST /v1/traces``)
    otlp_spans: SqlOtlpSpans | None = None

    # the record stores over the same database, each built once per bundle (on first use)

    @cached_property
    def incidents(self) -> SqlIncidentStore:
        """Incidents, their evidence freezes and the regression cases they produced."""
        return SqlIncidentStore(self.db)

    @cached_property
    def run_views(self) -> SqlRunViews:
        """Read-only views of recorded runs (evidence, policy decisions, runs of a graph)."""
        return SqlRunViews(self.db)

    @cached_property
    def slo_facts(self) -> SqlSloFacts:
        """The facts service-level objectives are computed from."""
        return SqlSloFacts(self.db)

    @cached_property
    def privacy_records(self) -> SqlPrivacyRecords:
        """Holds, deletions and the audit chain of raw reads (anchored with the runs)."""
        return SqlPrivacyRecords(self.db, self.anchors)

    @cached_property
    def alert_fingerprints(self) -> SqlAlertFingerprints:
        """Alertmanager fingerprints and the incident each one was taken into."""
        return SqlAlertFingerprints(self.db)


@contextlib.asynccontextmanager
async def open_stores(settings: StoreSettings) -> AsyncIterator[Stores]:
    """The stores of ``settings`` (``Settings.stores``), open until the block exits."""
    s3_secret = settings.artifacts.s3_secret_key
    artifacts = open_artifact_store(
        settings.artifacts_location,
        s3_endpoint_url=settings.artifacts.s3_endpoint_url,
        s3_access_key=settings.artifacts.s3_access_key,
        s3_secret_key=s3_secret.get_secret_value() if s3_secret is not None else None,
    )
    if isinstance(artifacts, S3ArtifactStore):
        # a new bucket gets Object Lock so that holds are enforced by the store itself
        await artifacts.ensure_bucket(object_lock=True)
    anchors = None
    if settings.anchors_location is not None:
        anchors = anchor_log_at(
            settings.anchors_location,
            load_anchor_keys(settings.anchors, settings.home),
            artifacts=artifacts,
            artifacts_location=settings.artifacts_location,
            s3=S3Access(
                settings.artifacts.s3_endpoint_url,
                settings.artifacts.s3_access_key,
                s3_secret.get_secret_value() if s3_secret is not None else None,
            ),
        )
        await anchors.ensure_location()
    db = await open_database(settings.database_url)
    try:
        # the KEK is loaded from its settings (or the dev key file under the home directory)
        # only when a raw payload is sealed or opened
        vault = SqlRawVault(
            db,
            artifacts,
            lambda: load_kek(settings.kek, settings.home),
            ingest_redaction=settings.kek.ingest_redaction,
        )
        ledger = SqlLedger(db, artifacts, vault=vault, anchors=anchors)
        evidence = SqlEvidenceReader(db)
        # the side-effect ledger opens: what a dead process left EXECUTING past its lease is
        # UNKNOWN from now on (reconciliation, never a silent retry)
        swept = await sweep_expired_side_effects(
            ledger, settings.database.side_effect_lease_seconds
        )
        stores = Stores(
            db=db,
            artifacts=artifacts,
            ledger=ledger,
            evidence=evidence,
            anchors=anchors,
            side_effect_lease_seconds=settings.database.side_effect_lease_seconds,
            swept=swept,
            otlp_spans=SqlOtlpSpans(db),
        )
        stores.privacy = PrivacyService(ledger, evidence, artifacts, vault, stores.privacy_records)
        yield stores
    finally:
        await db.dispose()
