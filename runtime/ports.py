"""The storage protocols the runtime needs; ``stores/`` implements them.

Declared here so the runtime depends on behaviour, not on SQLAlchemy or boto3.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class ArtifactStore(Protocol):
    """A content-addressed blob store keyed by ``sha256:<hex>`` digests.

    Every read re-hashes the bytes: a corrupted object raises ``ArtifactIntegrityError`` and
    never returns bad bytes. ``put`` is idempotent (same bytes, same key, one object).
    """

    #: A short description for logs and ``status`` output, e.g. ``file:///…`` or ``s3://b/p``.
    location: str

    async def put(self, data: bytes) -> str:
        """Store ``data`` and return its digest."""
        ...

    async def get(self, digest: str) -> bytes:
        """Return the bytes stored under ``digest`` after checking they hash to it."""
        ...

    async def exists(self, digest: str) -> bool: ...

    async def delete(self, digest: str) -> None:
        """Delete an object; refused with ``EvidenceLockedError`` under legal hold or retention."""
        ...

    async def set_legal_hold(self, digest: str, on: bool) -> None: ...

    async def legal_hold(self, digest: str) -> bool: ...

    async def set_retention(self, digest: str, until: datetime) -> None:
        """Keep the object at least until ``until`` (UTC); retention is only ever extended."""
        ...

    async def retention(self, digest: str) -> datetime | None: ...

    def enforced_by_backend(self) -> bool:
        """True when holds and retention are enforced by the storage itself (S3 Object Lock),
        not only by Replaybook's own code."""
        ...
