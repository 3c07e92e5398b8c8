"""Import fixtures: the real ledger on both SQL backends with a local artifact directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from tests.testdata import unpacked_testdata

TESTDATA = unpacked_testdata()
TAU = TESTDATA / "tau-bench"
TAU_FILES = (
    (TAU / "airline" / "gpt-4o-airline.json", "airline"),
    (TAU / "retail" / "agentrx-retail-full.json", "retail"),
    (TAU / "retail" / "agentrx-retail-failed.json", "retail"),
)
OTEL_FILES = tuple(sorted((TESTDATA / "otel-any-agent").glob("*_trace.json")))


@dataclass
class ImportStores:
    db: Database
    ledger: SqlLedger
    artifacts: LocalArtifactStore
    evidence: SqlEvidenceReader


@pytest.fixture
def stores(database: Database, tmp_path: Path) -> ImportStores:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    return ImportStores(
        database, SqlLedger(database, artifacts), artifacts, SqlEvidenceReader(database)
    )
