"""The runtime finds what a ledger offers beyond ``EventLedger`` by the protocols of
``runtime.ports`` (no attribute probing): the SQL ledger must be found to offer them, or a
recording would keep no data subjects and a replay would miss its source's destroyed content."""

from __future__ import annotations

from pathlib import Path

import pytest

from activities.sandbox.proxies import ProxyLedger
from runtime.ports import StoringLedger, subject_vault
from stores.bundle import open_stores
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_the_sql_ledger_offers_its_vault_and_artifact_store(
    tmp_path: Path, sqlite_url: str
) -> None:
    settings = Settings.from_env(
        {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_DATABASE_URL": sqlite_url}
    )
    async with open_stores(settings.stores) as stores:
        assert subject_vault(stores.ledger) is stores.ledger.vault
        assert isinstance(stores.ledger, StoringLedger)
        assert stores.ledger.artifacts is stores.artifacts


async def test_a_sandboxed_steps_vault_only_seals() -> None:
    """A sandboxed step's vault keeps raw forms but answers nothing about subjects."""
    assert subject_vault(ProxyLedger(lambda method, params: None)) is None
    assert subject_vault(object()) is None
