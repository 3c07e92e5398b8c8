"""The SDK's tests run against the real API process over PostgreSQL (``servers.ApiProcess``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import replaybook

from tests.sdk.servers import TOKEN, ApiProcess, ChatServer


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[ApiProcess]:
    process = ApiProcess(tmp_path_factory.mktemp("sdk-api"), postgres_url)
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer() as server:
        yield server


@pytest.fixture
def spool(tmp_path: Path, api: ApiProcess) -> Path:
    """This test's spool directory, with the SDK configured for the API (strict: a recording
    failure fails the test)."""
    directory = tmp_path / "spool"
    replaybook.configure(
        url=api.url, token=TOKEN, spool_dir=directory, strict=True, flush_interval=0.05
    )
    return directory
