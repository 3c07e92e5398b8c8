"""Fixtures shared by the store tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from stores.artifacts import LocalArtifactStore
from stores.sql.database import Database
from stores.sql.ledger import SqlLedger


@pytest.fixture
def ledger(database: Database, tmp_path: Path) -> SqlLedger:
    """A ledger on the ``database`` fixture (SQLite and PostgreSQL) with its artifacts under
    the test's directory. ``test_ledger_contract`` overrides it with its own (both commit
    modes, a small inline limit)."""
    return SqlLedger(database, LocalArtifactStore(tmp_path / "artifacts"))
