"""The ``Stores`` bundle offers every record store the app needs, each built once over the
bundle's own database (the faces and the app never build one by hand)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stores.bundle import open_stores
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

RECORD_STORES = ("incidents", "run_views", "slo_facts", "privacy_records", "alert_fingerprints")


async def test_the_record_stores_are_built_once_over_the_bundles_database(
    tmp_path: Path, sqlite_url: str
) -> None:
    settings = Settings.from_env(
        {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_DATABASE_URL": sqlite_url}
    )
    async with open_stores(settings.stores) as stores:
        for name in RECORD_STORES:
            store = getattr(stores, name)
            assert getattr(stores, name) is store, name
            assert store.db is stores.db, name
        # the privacy service records into the bundle's own, anchored with the runs
        assert stores.privacy is not None
        assert stores.privacy.records is stores.privacy_records
        assert stores.privacy_records.anchors is stores.anchors is not None
