"""The anchor log, outside the database: write-once objects beside the artifacts.

Layout (under the artifact store's root directory or bucket prefix)::

    anchors/log/<index, 12 digits>.json                    the hash-chained log (models.anchor)
    anchors/run-anchors/<sha256 of the run id>/<sequence>-<index>.json
                                                           the same entry, to find a run's latest

A run's directory is named by a digest of its id: a fixed-length name whatever the id (an id of
the documented pattern, quoted, could pass the file system's 255-byte limit on a name: "File
name too long"). Entries written under ``anchors/runs/<quoted run id>/`` by earlier versions
are still read.

Entries are written once and never replaced: a local file is created exclusively and left
read-only; an S3 object is written only when absent and, in a bucket with Object Lock, under
COMPLIANCE retention, which no one (not even the bucket owner) can shorten or remove. Whoever
also controls that Object Lock (or the anchor directory) is out of scope.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from botocore.exceptions import ClientError

from models.anchor import ANCHOR_GENESIS, Anchor, AnchorEntry, anchor_entry, verify_anchor_log
from models.chain import VerificationProblem
from models.errors import ConflictError, IntegrityError, StoreError
from runtime.ports import ArtifactStore
from stores.artifacts import LocalArtifactStore, S3ArtifactStore

__all__ = ["AnchorLog", "open_anchor_log"]

#: how long an S3 anchor is kept under COMPLIANCE retention
ANCHOR_RETENTION = timedelta(days=3650)
_APPEND_ATTEMPTS = 20


class _Objects(Protocol):
    """Named write-once objects."""

    location: str

    async def create(self, name: str, data: bytes) -> bool:
        """Write ``name`` unless it exists; False when it already did."""
        ...

    async def read(self, name: str) -> bytes | None: ...

    async def names(self, prefix: str) -> list[str]:
        """The names under ``prefix``, sorted."""
        ...


class _LocalObjects:
    def __init__(self, root: Path) -> None:
        self.root = root / "anchors"
        self.location = self.root.as_uri()

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


class _S3Objects:
    def __init__(self, store: S3ArtifactStore) -> None:
        self.store = store
        self.base = f"{store.prefix}/anchors/" if store.prefix else "anchors/"
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
        client, bucket, start = self.store.client, self.store.bucket, self.base + prefix

        def list_() -> list[str]:
            out: list[str] = []
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=start
            ):
                out += [o["Key"][len(start) :] for o in page.get("Contents", [])]
            return sorted(n for n in out if "/" not in n and n.endswith(".json"))

        return await self._run("list anchors", list_)

    async def _run(self, what: str, fn: Any) -> Any:
        try:
            return await asyncio.to_thread(fn)
        except ClientError as e:
            raise StoreError(f"S3 {what} in {self.location} failed: {e}") from e


class AnchorLog:
    """Append anchors; read a run's latest; verify the whole log."""

    def __init__(self, objects: _Objects) -> None:
        self.objects = objects
        self.location = objects.location

    async def append(self, anchor: Anchor) -> AnchorEntry:
        """Append ``anchor`` after the log's last entry (a concurrent writer that takes the
        index first makes this one try the next index)."""
        for _ in range(_APPEND_ATTEMPTS):
            names = await self.objects.names("log/")
            previous, index = ANCHOR_GENESIS, 1
            if names:
                last = await self._entry(f"log/{names[-1]}")
                previous, index = last.hash, last.index + 1
            entry = anchor_entry(anchor, index, previous)
            data = entry.model_dump_json().encode()
            if await self.objects.create(f"log/{index:012d}.json", data):
                await self.objects.create(
                    f"{_run_dir(anchor.run_id)}{anchor.sequence:012d}-{index:012d}.json", data
                )
                return entry
        raise ConflictError(f"anchor log {self.location}: too many concurrent appends")

    async def latest(self, run_id: str) -> AnchorEntry | None:
        """The run's anchor with the highest sequence (then the latest), or None."""
        found = [
            (name, where) for where in _run_dirs(run_id) for name in await self.objects.names(where)
        ]
        if not found:
            return None
        name, where = max(found)
        return await self._entry(f"{where}{name}")

    async def entries(self) -> list[AnchorEntry]:
        return [await self._entry(f"log/{n}") for n in await self.objects.names("log/")]

    async def verify(self) -> tuple[list[AnchorEntry], list[VerificationProblem]]:
        entries = await self.entries()
        return entries, verify_anchor_log(entries)

    async def _entry(self, name: str) -> AnchorEntry:
        data = await self.objects.read(name)
        if data is None:
            raise StoreError(f"anchor {name} vanished from {self.location}")
        try:
            return AnchorEntry.model_validate_json(data)
        except ValueError as exc:
            raise IntegrityError(
                f"anchor {name} in {self.location} is not an anchor entry"
            ) from exc


def _run_dir(run_id: str) -> str:
    """Where the run's anchors are written (module docstring)."""
    return f"run-anchors/{hashlib.sha256(run_id.encode()).hexdigest()}/"


#: the longest quoted run id an earlier version could have written a directory for
_NAME_LIMIT = 255


def _run_dirs(run_id: str) -> list[str]:
    """Where the run's anchors may be: where they are written, and where earlier versions
    wrote them (when that name can exist at all)."""
    quoted = quote(run_id, safe="")
    legacy = [f"runs/{quoted}/"] if len(quoted) <= _NAME_LIMIT else []
    return [_run_dir(run_id), *legacy]


def open_anchor_log(artifacts: ArtifactStore) -> AnchorLog | None:
    """The anchor log beside ``artifacts`` (None for a store that has no place for it)."""
    if isinstance(artifacts, LocalArtifactStore):
        return AnchorLog(_LocalObjects(artifacts.root))
    if isinstance(artifacts, S3ArtifactStore):
        return AnchorLog(_S3Objects(artifacts))
    return None
