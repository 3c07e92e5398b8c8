"""Artifact stores: content-addressed blobs keyed by ``sha256:<hex>`` digests.

``open_artifact_store(spec)`` turns a setting into a store:

* ``/var/lib/replaybook/artifacts``, ``./artifacts``, ``~/artifacts`` or ``file:///abs/path``
  → ``LocalArtifactStore``
* ``s3://bucket`` or ``s3://bucket/some/prefix`` → ``S3ArtifactStore``
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from models.errors import ConfigurationError
from runtime.ports import ArtifactStore
from stores.artifacts.local import LocalArtifactStore
from stores.artifacts.s3 import (
    RetentionMode,
    S3ArtifactStore,
    validate_bucket_name,
    validate_prefix,
)

__all__ = ["ArtifactStore", "LocalArtifactStore", "S3ArtifactStore", "open_artifact_store"]


def open_artifact_store(
    spec: str,
    *,
    s3_endpoint_url: str | None = None,
    s3_region: str = "us-east-1",
    s3_access_key: str | None = None,
    s3_secret_key: str | None = None,
    s3_retention_mode: RetentionMode = "GOVERNANCE",
) -> ArtifactStore:
    """The store named by ``spec``; ``ConfigurationError`` names what is wrong with a bad one.

    Nothing is contacted or created here. S3 credentials default to boto3's usual chain
    (environment, profile, instance role) when not given.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigurationError("empty artifact store location (expected a directory or s3://…)")
    spec = spec.strip()
    if "://" not in spec:
        return LocalArtifactStore(Path(spec))

    url = urlsplit(spec)
    scheme = url.scheme.lower()
    if url.query or url.fragment:
        raise ConfigurationError(f"artifact store location {spec!r} must not have '?' or '#' parts")
    if scheme == "file":
        if url.netloc not in ("", "localhost"):
            raise ConfigurationError(
                f"artifact store location {spec!r} names host {url.netloc!r}; "
                "file:// locations must be local (file:///absolute/path)"
            )
        path = unquote(url.path)
        if not path.startswith("/"):
            raise ConfigurationError(
                f"artifact store location {spec!r} has no absolute path (file:///absolute/path)"
            )
        return LocalArtifactStore(Path(path))
    if scheme == "s3":
        if not url.netloc:
            raise ConfigurationError(
                f"artifact store location {spec!r} has no bucket (s3://bucket/prefix)"
            )
        try:
            bucket = validate_bucket_name(url.netloc)
            prefix = validate_prefix(unquote(url.path))
        except ConfigurationError as e:
            raise ConfigurationError(f"artifact store location {spec!r}: {e}") from None
        return S3ArtifactStore(
            bucket,
            prefix,
            endpoint_url=s3_endpoint_url,
            region_name=s3_region,
            access_key=s3_access_key,
            secret_key=s3_secret_key,
            retention_mode=s3_retention_mode,
        )
    raise ConfigurationError(
        f"unsupported artifact store location {spec!r}: scheme {url.scheme!r} "
        "(expected a directory, file:///path or s3://bucket/prefix)"
    )
