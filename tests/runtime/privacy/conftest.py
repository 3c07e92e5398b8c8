"""Privacy fixtures: the real ledger with a raw vault under a fixed test KEK, on both SQL
backends (and the local artifact directory; S3 tests take ``s3_artifact_store``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.temporal_server import start_temporal_dev_server
from examples.support_desk.providers import SimulatedWorld
from runtime.privacy.service import PrivacyService
from stores.artifacts import LocalArtifactStore
from stores.bundle import open_stores
from stores.encryption import LocalKeyEncryptionKey
from stores.sql.database import Database, open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from stores.sql.privacy import SqlRawVault
from stores.sql.privacy_records import SqlPrivacyRecords
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_db import PG_ADMIN_URL
from tests.fixtures_replay import ReplayStack, stack_settings
from worker.temporal import running_workers

TEST_KEK = LocalKeyEncryptionKey(os.urandom(32))


@dataclass
class PrivacyStack:
    db: Database
    ledger: SqlLedger
    artifacts: LocalArtifactStore
    evidence: SqlEvidenceReader
    vault: SqlRawVault
    privacy: PrivacyService
    world: SimulatedWorld


async def make_stack(db: Database, artifacts: LocalArtifactStore) -> PrivacyStack:
    vault = SqlRawVault(db, artifacts, TEST_KEK)
    ledger = SqlLedger(db, artifacts, vault=vault)
    evidence = SqlEvidenceReader(db)
    world = SimulatedWorld(SqlWorldStore.beside(db.engine.url))
    await world.ensure()
    service = PrivacyService(ledger, evidence, artifacts, vault, SqlPrivacyRecords(db))
    return PrivacyStack(db, ledger, artifacts, evidence, vault, service, world)


@pytest_asyncio.fixture(loop_scope="session", params=["sqlite", "postgresql"])
async def private_database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Database]:
    """A fresh database per test, on both backends: deleting a data subject reaches every run
    of that subject in a database, so in the session's shared database it would meet other
    tests' runs of the same customer (and their incident freezes, which rightly refuse it)."""
    if request.param == "sqlite":
        db = await open_database(f"sqlite+aiosqlite:///{tmp_path / 'privacy.db'}")
        yield db
        await db.dispose()
        return
    url = await create_scratch_database(PG_ADMIN_URL, "rb_privacy")
    db = await open_database(url)
    try:
        yield db
    finally:
        await db.dispose()
        await drop_scratch_database(PG_ADMIN_URL, url)


@pytest.fixture
async def stack(private_database: Database, tmp_path: Path) -> PrivacyStack:
    return await make_stack(private_database, LocalArtifactStore(tmp_path / "artifacts"))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def isolated_replay_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ReplayStack]:
    """A replay stack of its own: its own Temporal dev server, database, artifacts and KEK.

    Deleting a data subject is global to a database: on the session's shared stack it would
    destroy raw content other tests' runs of the same customer rely on, and their incident
    freezes would (rightly) refuse it. Workers of a second stack on the shared server would
    take each other's tasks, so this one gets its own server."""
    server = start_temporal_dev_server(tmp_path_factory.mktemp("privacy-temporal"), headless=True)
    try:
        client = await Client.connect(
            server.address, namespace=server.namespace, data_converter=pydantic_data_converter
        )
        settings = stack_settings(tmp_path_factory.mktemp("privacy-home"), server.address)
        async with open_stores(settings.stores) as stores:
            world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
            await world.ensure()
            async with running_workers(settings, "all", client):
                yield ReplayStack(settings, client, stores, world)
    finally:
        server.stop(timeout=10)
