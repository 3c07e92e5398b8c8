"""Where the anchor log's entries are kept: named write-once objects in a local directory or an
S3 bucket (``stores.anchors``). A local file is created exclusively and left read-only; an S3
object is written only when absent and, in a bucket with Object Lock, under COMPLIANCE
retention, which no one (not even the bucket owner) can shorten or remove."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from botocore.exceptions import ClientError

from models.errors import StoreError
from stores.artifacts import S3ArtifactStore

__all__ = ["ANCHOR_RETENTION", "LocalObjects", "Objects", "S3Objects"]

#: how long an S3 anchor is kept under COMPLIANCE retention
ANCHOR_RETENTION = timedelta(days=3650)


class Objects(Protocol):
    """Named write-once objects."""

    location: str

    async def create(self, name: str, data: bytes) -> bool:
        """Write ``name`` unless it exists; False when it already did."""
        ...

    async def read(self, name: str) -> bytes | None: ...

    async def names(self, prefix: str) -> list[str]:
        """The names under ``prefix``, sorted."""
        ...

    async def tree(self, prefix: str) -> list[str]:
        """Every name under ``prefix``, at any depth, relative to it."""
        ...


class LocalObjects:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.location = self.root.as_uri() + "/"

    async def create(self, name: str, data: bytes) -> bool:
        return await asyncio.to_thread(self._create, name, data)

    def _create(self, name: str, data: bytes) -> bool:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return True

    async def read(self, name: str) -> bytes | None:
        path = self.root / name
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def names(self, prefix: str) -> list[str]:
        def list_() -> list[str]:
            base = self.root / prefix
            if not base.is_dir():
                return []
            return sorted(p.name for p in base.iterdir() if p.suffix == ".json")

        return await asyncio.to_thread(list_)

    async def tree(self, prefix: str) -> list[str]:
        def walk() -> list[str]:
            base = self.root / prefix
            if not base.is_dir():
                return []
            return sorted(str(p.relative_to(base)) for p in base.rglob("*.json"))

        return await asyncio.to_thread(walk)


class S3Objects:
    def __init__(self, store: S3ArtifactStore, under: str = "") -> None:
        self.store = store
        base = f"{store.prefix}/{under}" if store.prefix else under
        self.base = base if not base or base.endswith("/") else base + "/"
        self.location = f"s3://{store.bucket}/{self.base}"

    async def create(self, name: str, data: bytes) -> bool:
        lock = await self.store.object_lock_enabled()
        client, bucket, key = self.store.client, self.store.bucket, self.base + name

        def create() -> bool:
            try:
                client.head_object(Bucket=bucket, Key=key)
                return False
            except ClientError as e:
                if str(e.response.get("Error", {}).get("Code", "")) not in {"404", "NoSuchKey"}:
                    raise
            kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": data}
            if lock:
                kwargs["ObjectLockMode"] = "COMPLIANCE"
                kwargs["ObjectLockRetainUntilDate"] = datetime.now(UTC) + ANCHOR_RETENTION
            client.put_object(**kwargs)
            return True

        return await self._run("write anchor", create)

    async def read(self, name: str) -> bytes | None:
        client, bucket, key = self.store.client, self.store.bucket, self.base + name

        def read() -> bytes | None:
            try:
                return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            except ClientError as e:
                if str(e.response.get("Error", {}).get("Code", "")) in {"404", "NoSuchKey"}:
                    return None
                raise

        return await self._run("read anchor", read)

    async def names(self, prefix: str) -> list[str]:
        return [n for n in await self.tree(prefix) if "/" not in n]

    async def tree(self, prefix: str) -> list[str]:
        client, bucket, start = self.store.client, self.store.bucket, self.base + prefix

        def list_() -> list[str]:
            out: list[str] = []
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=start
            ):
                out += [o["Key"][len(start) :] for o in page.get("Contents", [])]
            return sorted(n for n in out if n.endswith(".json"))

        return await self._run("list anchors", list_)

    async def _run(self, what: str, fn: Any) -> Any:
        try:
            return await asyncio.to_thread(fn)
        except ClientError as e:
            raise StoreError(f"S3 {what} in {self.location} failed: {e}") from e
