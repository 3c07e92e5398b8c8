"""Where the anchor log's entries are kept: named write-once objects in a local directory or an
S3 bucket (``stores.anchors``), each written whole under its name or not at all, by one writer
only when two race for it.

A local file is written and synced under a temporary name, then linked to its name (``link``
fails when the name exists: atomic and exclusive), and left read-only: a writer that dies
half-way leaves no short entry holding an index. An S3 object is put with ``If-None-Match: *``
(the server refuses the second writer with 412 PreconditionFailed: no check-then-put window),
in a bucket with Object Lock under COMPLIANCE retention, which no one (not even the bucket
owner) can shorten or remove. The first entry a process writes is put twice: a server that
honours the precondition refuses the second put; one that ignores it (warned once) has every
object read back after its put, so another writer's bytes replacing these ones are seen as a
lost race (docs/threat-model.md states that limit)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import structlog
from botocore.exceptions import ClientError

from models.errors import StoreError
from stores.artifacts import S3ArtifactStore

__all__ = ["ANCHOR_RETENTION", "LocalObjects", "Objects", "S3Objects"]

log = structlog.get_logger(__name__)

#: how long an S3 anchor is kept under COMPLIANCE retention
ANCHOR_RETENTION = timedelta(days=3650)
#: puts of one anchor answered 409 ConditionalRequestConflict (a concurrent conditional write
#: the server could not order) tried again before giving up
_CONFLICT_ATTEMPTS = 5


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
        if path.exists():  # the common loser of a race: no temporary file written for nothing
            return False
        # a name starting with "." and not ending in ".json": never listed as an entry
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, path)  # the whole entry appears under its name, or nothing does
            except FileExistsError:
                return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
        _sync_directory(path.parent)
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
        #: whether the server refuses a second ``If-None-Match: *`` put of a key (None: not
        #: seen yet; learnt from the first entry this process writes, or any refusal)
        self.conditional_writes: bool | None = None

    async def create(self, name: str, data: bytes) -> bool:
        lock = await self.store.object_lock_enabled()
        client, bucket, key = self.store.client, self.store.bucket, self.base + name
        kwargs: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": data}
        # the server writes only when the key is absent: two writers (or an attacker racing
        # the writer) cannot both pass a check made before the put
        kwargs["IfNoneMatch"] = "*"
        if lock:
            kwargs["ObjectLockMode"] = "COMPLIANCE"
            kwargs["ObjectLockRetainUntilDate"] = datetime.now(UTC) + ANCHOR_RETENTION

        def create() -> bool:
            if not self._put_if_absent(kwargs):
                return False
            if self.conditional_writes is None:
                # the same bytes again, once: a server that honours the precondition refuses
                # them; one that writes them (harmless: the same entry) ignores it
                self.conditional_writes = not self._put_if_absent(kwargs)
                if not self.conditional_writes:
                    log.warning("S3 server ignores If-None-Match", location=self.location)
            if self.conditional_writes:
                return True
            # a server that ignored the precondition may have let another writer's bytes
            # replace these: then that writer holds the name, and this one lost
            stored = client.get_object(Bucket=bucket, Key=key)["Body"].read()
            return bool(stored == data)

        return await self._run("write anchor", create)

    def _put_if_absent(self, kwargs: dict[str, Any]) -> bool:
        """Put; False when the server refused it because the key exists (412)."""
        for attempt in range(_CONFLICT_ATTEMPTS):
            try:
                self.store.client.put_object(**kwargs)
                return True
            except ClientError as e:
                code = _code(e)
                if code in {"412", "PreconditionFailed"}:
                    self.conditional_writes = True
                    return False
                # 409: a concurrent conditional write the server could not order: again
                if code not in {"409", "ConditionalRequestConflict"}:
                    raise
                if attempt == _CONFLICT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def read(self, name: str) -> bytes | None:
        client, bucket, key = self.store.client, self.store.bucket, self.base + name

        def read() -> bytes | None:
            try:
                return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
            except ClientError as e:
                if _code(e) in {"404", "NoSuchKey"}:
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


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _sync_directory(directory: Path) -> None:
    """Make a new name in ``directory`` durable (its entry, not only the file's bytes)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
