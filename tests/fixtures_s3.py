"""Artifact-store fixtures: one real SeaweedFS (``weed mini``) per test session.

No skipping: if SeaweedFS cannot start, every test that needs it errors.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from devstack.seaweedfs import SeaweedFS, start_seaweedfs
from stores.artifacts import LocalArtifactStore, S3ArtifactStore


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server
    finally:
        server.stop(timeout=10)


@pytest.fixture(scope="session")
def s3_client(seaweedfs: SeaweedFS) -> Any:
    """A raw boto3 client on the session's SeaweedFS, for acting behind a store's back."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=seaweedfs.endpoint_url,
        aws_access_key_id=seaweedfs.access_key,
        aws_secret_access_key=seaweedfs.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def unique_bucket_name() -> str:
    return f"rb-test-{uuid.uuid4().hex[:16]}"


def make_s3_store(seaweedfs: SeaweedFS, bucket: str, **kwargs: Any) -> S3ArtifactStore:
    return S3ArtifactStore(
        bucket,
        kwargs.pop("prefix", "artifacts"),
        endpoint_url=seaweedfs.endpoint_url,
        access_key=seaweedfs.access_key,
        secret_key=seaweedfs.secret_key,
        **kwargs,
    )


@pytest.fixture
async def s3_artifact_store(seaweedfs: SeaweedFS) -> AsyncIterator[S3ArtifactStore]:
    """A store on a fresh bucket with Object Lock (GOVERNANCE mode), prefix ``artifacts``.

    Buckets are not emptied afterwards: locked objects outlive the test by design, and the
    whole SeaweedFS data directory is discarded with the session.
    """
    store = make_s3_store(seaweedfs, unique_bucket_name())
    await store.ensure_bucket(object_lock=True)
    yield store


@pytest.fixture
def local_artifact_store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")
