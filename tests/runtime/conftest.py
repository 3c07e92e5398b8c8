"""Recording fixtures: the real ledger and stores on both SQL backends."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.support_desk.providers import SimulatedWorld
from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.support_desk_world import SqlWorldStore


@dataclass
class Recording:
    db: Database
    ledger: SqlLedger
    artifacts: LocalArtifactStore
    evidence: SqlEvidenceReader
    world: SimulatedWorld


@pytest.fixture
async def rec(database: Database, tmp_path: Path) -> Recording:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    world = SimulatedWorld(SqlWorldStore.beside(database.engine.url))
    await world.ensure()
    return Recording(
        database, SqlLedger(database, artifacts), artifacts, SqlEvidenceReader(database), world
    )
