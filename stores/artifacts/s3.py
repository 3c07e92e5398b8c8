"""A content-addressed artifact store in an S3 bucket (AWS S3, SeaweedFS, MinIO, …).

Objects live at ``<prefix>/sha256/<64 hex>``. In a bucket with Object Lock (which implies
versioning), legal holds and retention are S3 Object Lock settings applied to *every version*
of the key, so the server itself refuses to delete a locked version; ``enforced_by_backend()``
is then True. In a bucket without Object Lock, holds and retention are recorded in small
sidecar objects under ``<prefix>/locks/sha256/`` and only this code refuses deletion.

A digest is locked when any version of its key is: ``legal_hold()`` is True when any version is
held and ``retention()`` is the latest retain-until date of all versions.

Blocking boto3 calls run in ``asyncio.to_thread``; botocore errors are translated at this
boundary (the original is chained as ``__cause__``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, FlexibleChecksumError

from models.digest import sha256_digest, verify_content
from models.errors import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ConfigurationError,
    EvidenceLockedError,
    ReplaybookError,
    StoreError,
)
from stores.artifacts.local import check_bytes, normalize_retain_until, strict_digest_hex

T = TypeVar("T")
RetentionMode = Literal["GOVERNANCE", "COMPLIANCE"]

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_NOT_FOUND = {"NoSuchKey", "NotFound", "404", "NoSuchVersion"}
# "No retention on this version": AWS says NoSuchObjectLockConfiguration, SeaweedFS says
# ObjectLockConfigurationNotFoundError.
_NO_RETENTION = {"NoSuchObjectLockConfiguration", "ObjectLockConfigurationNotFoundError"}
_NO_LEGAL_HOLD = {"NoSuchObjectLegalHold", "NoSuchObjectLockConfiguration"}


def validate_bucket_name(bucket: str) -> str:
    if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ConfigurationError(
            f"invalid S3 bucket name {bucket!r} (3-63 lowercase letters, digits, '.' or '-')"
        )
    return bucket


def validate_prefix(prefix: str) -> str:
    """``prefix`` without leading/trailing slashes; refuses empty, ``.`` and ``..`` segments."""
    prefix = (prefix or "").strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ConfigurationError(f"invalid S3 key prefix {prefix!r} (empty, '.' or '..' segment)")
    return prefix


def _error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


class S3ArtifactStore:
    """``ArtifactStore`` on ``s3://bucket/prefix``; see the module docstring."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region_name: str = "us-east-1",
        access_key: str | None = None,
        secret_key: str | None = None,
        retention_mode: RetentionMode = "GOVERNANCE",
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        client: Any | None = None,
    ) -> None:
        self.bucket = validate_bucket_name(bucket)
        self.prefix = validate_prefix(prefix)
        if retention_mode not in ("GOVERNANCE", "COMPLIANCE"):
            raise ConfigurationError(
                f"invalid retention mode {retention_mode!r} (GOVERNANCE or COMPLIANCE)"
            )
        self.retention_mode: RetentionMode = retention_mode
        self.endpoint_url = endpoint_url
        self.location = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        if client is None:
            config = Config(
                region_name=region_name,
                signature_version="s3v4",
                # S3-compatible servers (SeaweedFS, MinIO) want path-style addressing.
                s3={"addressing_style": "path" if endpoint_url else "auto"},
                # One attempt only: Temporal retries whole activities with backoff and records
                # each attempt; retries hidden inside the client would multiply latency and
                # blur what failed. max_attempts counts the first call in "standard" mode.
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
            )
            # A session of its own: boto3's default session is not safe to share across threads.
            client = boto3.session.Session().client(
                "s3",
                endpoint_url=endpoint_url,
                aws_access_key_id=access_key,
                aws_secret_access_key=secret_key,
                config=config,
            )
        self.client = client
        self._object_lock: bool | None = None

    def __repr__(self) -> str:
        return f"S3ArtifactStore({self.location!r}, endpoint_url={self.endpoint_url!r})"

    # -- keys and plumbing ---------------------------------------------------------------------

    def key_for(self, digest: str) -> str:
        """The object key of ``digest`` (validates the digest)."""
        key = f"sha256/{strict_digest_hex(digest)}"
        return f"{self.prefix}/{key}" if self.prefix else key

    def _lock_key(self, digest: str, suffix: str) -> str:
        key = f"locks/sha256/{strict_digest_hex(digest)}.{suffix}"
        return f"{self.prefix}/{key}" if self.prefix else key

    async def _run(self, what: str, digest: str | None, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except ReplaybookError:
            raise
        except (BotoCoreError, ClientError) as e:
            raise self._translate(e, what, digest) from e

    def _translate(self, e: Exception, what: str, digest: str | None) -> ReplaybookError:
        subject = f"artifact {digest}" if digest else self.location
        if isinstance(e, FlexibleChecksumError):
            return ArtifactIntegrityError(f"{subject} failed checksum validation on read: {e}")
        if isinstance(e, ClientError):
            code = _error_code(e)
            if code in _NOT_FOUND and digest is not None:
                return ArtifactNotFoundError(f"artifact {digest} not found in {self.location}")
            if code == "NoSuchBucket":
                return ConfigurationError(f"S3 bucket {self.bucket!r} does not exist")
            message = e.response.get("Error", {}).get("Message", "")
            return StoreError(f"S3 {what} of {subject} failed: {code} {message}".rstrip())
        return StoreError(f"S3 {what} of {subject} failed: {e}")

    def _is_missing(self, e: ClientError) -> bool:
        return _error_code(e) in _NOT_FOUND

    # -- bucket --------------------------------------------------------------------------------

    async def ensure_bucket(self, object_lock: bool = True) -> None:
        """Create the bucket (with Object Lock, hence versioning) unless it exists."""

        def ensure() -> None:
            try:
                self.client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as e:
                if _error_code(e) not in {"404", "NoSuchBucket", "NotFound"}:
                    raise
            kwargs: dict[str, Any] = {"Bucket": self.bucket}
            if object_lock:
                kwargs["ObjectLockEnabledForBucket"] = True
            region = self.client.meta.region_name
            if region and region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
            try:
                self.client.create_bucket(**kwargs)
            except ClientError as e:
                if _error_code(e) != "BucketAlreadyOwnedByYou":
                    raise

        await self._run("create bucket", None, ensure)
        self._object_lock = None
        await self.object_lock_enabled()

    def _probe_object_lock(self) -> bool:
        try:
            conf = self.client.get_object_lock_configuration(Bucket=self.bucket)
        except ClientError as e:
            if _error_code(e) in _NO_RETENTION:
                return False
            raise
        return conf.get("ObjectLockConfiguration", {}).get("ObjectLockEnabled") == "Enabled"

    async def object_lock_enabled(self) -> bool:
        """Whether the bucket has S3 Object Lock (probed once, then cached)."""
        if self._object_lock is None:
            self._object_lock = await self._run(
                "get object lock configuration", None, self._probe_object_lock
            )
        return self._object_lock

    def enforced_by_backend(self) -> bool:
        """True when the bucket has Object Lock. Blocks on one request the first time if neither
        ``ensure_bucket()`` nor ``object_lock_enabled()`` has been awaited yet."""
        if self._object_lock is None:
            try:
                self._object_lock = self._probe_object_lock()
            except (BotoCoreError, ClientError) as e:
                raise self._translate(e, "get object lock configuration", None) from e
        return self._object_lock

    # -- objects -------------------------------------------------------------------------------

    async def put(self, data: bytes) -> str:
        data = check_bytes(data)
        digest = sha256_digest(data)
        key = self.key_for(digest)
        checksum = base64.b64encode(hashlib.sha256(data).digest()).decode()

        def put() -> None:
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=key, ChecksumMode="ENABLED")
            except ClientError as e:
                if not self._is_missing(e):
                    raise
            else:
                # Content-addressed: skip when the server verified these very bytes on upload.
                # An object without our SHA-256 (written behind our back) is uploaded again.
                if head.get("ChecksumSHA256") == checksum and head["ContentLength"] == len(data):
                    return
            # The server recomputes the SHA-256 and refuses the upload (BadDigest) on mismatch.
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                ChecksumSHA256=checksum,
                ContentType="application/octet-stream",
            )

        await self._run("put", digest, put)
        return digest

    async def get(self, digest: str) -> bytes:
        key = self.key_for(digest)

        def get() -> bytes:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            with response["Body"] as body:
                return body.read()

        data = await self._run("get", digest, get)
        return verify_content(data, digest, f"artifact {digest} in {self.location}")

    async def exists(self, digest: str) -> bool:
        key = self.key_for(digest)

        def exists() -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=key)
            except ClientError as e:
                if self._is_missing(e):
                    return False
                raise
            return True

        return await self._run("head", digest, exists)

    def _versions(self, key: str) -> tuple[list[str], list[str]]:
        """Version ids of ``key``: (object versions, delete markers), newest first."""
        versions: list[str] = []
        markers: list[str] = []
        paginator = self.client.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=key):
            versions += [v["VersionId"] for v in page.get("Versions", []) if v["Key"] == key]
            markers += [m["VersionId"] for m in page.get("DeleteMarkers", []) if m["Key"] == key]
        return versions, markers

    def _require_versions(self, digest: str) -> list[str]:
        versions, _ = self._versions(self.key_for(digest))
        if not versions:
            raise ArtifactNotFoundError(f"artifact {digest} not found in {self.location}")
        return versions

    async def delete(self, digest: str) -> None:
        """Delete every version of the object (and its delete markers); a no-op when absent.

        Refused with ``EvidenceLockedError`` when any version is under legal hold or retention.
        """
        key = self.key_for(digest)
        lock = await self.object_lock_enabled()

        def delete() -> None:
            versions, markers = self._versions(key)
            if not versions and not markers:
                return
            self._refuse_if_locked(digest, versions, lock)
            for version_id in versions + markers:
                self.client.delete_object(Bucket=self.bucket, Key=key, VersionId=version_id)
            if not lock:
                for suffix in ("legal-hold", "retain-until"):
                    self.client.delete_object(
                        Bucket=self.bucket, Key=self._lock_key(digest, suffix)
                    )

        await self._run("delete", digest, delete)

    def _refuse_if_locked(self, digest: str, versions: list[str], lock: bool) -> None:
        if not versions:
            return
        reasons = []
        if self._hold_sync(digest, versions, lock):
            reasons.append("it is under legal hold")
        until = self._retention_sync(digest, versions, lock)
        if until is not None and until > datetime.now(UTC):
            reasons.append(f"it is retained until {until.isoformat()}")
        if reasons:
            raise EvidenceLockedError(
                f"refusing to delete artifact {digest}: {' and '.join(reasons)}"
            )

    # -- legal hold ----------------------------------------------------------------------------

    async def set_legal_hold(self, digest: str, on: bool) -> None:
        key = self.key_for(digest)
        lock = await self.object_lock_enabled()

        def set_hold() -> None:
            versions = self._require_versions(digest)
            if lock:
                for version_id in versions:
                    self.client.put_object_legal_hold(
                        Bucket=self.bucket,
                        Key=key,
                        VersionId=version_id,
                        LegalHold={"Status": "ON" if on else "OFF"},
                    )
            elif on:
                stamp = datetime.now(UTC).isoformat().encode()
                self.client.put_object(
                    Bucket=self.bucket, Key=self._lock_key(digest, "legal-hold"), Body=stamp
                )
            else:
                self.client.delete_object(
                    Bucket=self.bucket, Key=self._lock_key(digest, "legal-hold")
                )

        await self._run("set legal hold", digest, set_hold)

    async def legal_hold(self, digest: str) -> bool:
        self.key_for(digest)
        lock = await self.object_lock_enabled()

        def hold() -> bool:
            return self._hold_sync(digest, self._require_versions(digest), lock)

        return await self._run("get legal hold", digest, hold)

    def _hold_sync(self, digest: str, versions: list[str], lock: bool) -> bool:
        if not lock:
            return self._sidecar(digest, "legal-hold") is not None
        key = self.key_for(digest)
        for version_id in versions:
            try:
                response = self.client.get_object_legal_hold(
                    Bucket=self.bucket, Key=key, VersionId=version_id
                )
            except ClientError as e:
                if _error_code(e) in _NO_LEGAL_HOLD:
                    continue
                raise
            if response.get("LegalHold", {}).get("Status") == "ON":
                return True
        return False

    def _sidecar(self, digest: str, suffix: str) -> bytes | None:
        try:
            response = self.client.get_object(
                Bucket=self.bucket, Key=self._lock_key(digest, suffix)
            )
        except ClientError as e:
            if self._is_missing(e):
                return None
            raise
        with response["Body"] as body:
            return body.read()

    # -- retention -----------------------------------------------------------------------------

    async def set_retention(self, digest: str, until: datetime) -> None:
        """Keep every version at least until ``until``. Retention is only ever extended: an
        earlier date than a version's current one (or a date already past) leaves it as is.
        A version already in COMPLIANCE mode stays in COMPLIANCE mode."""
        until = normalize_retain_until(until)
        key = self.key_for(digest)
        lock = await self.object_lock_enabled()

        def set_retention() -> None:
            versions = self._require_versions(digest)
            if until <= datetime.now(UTC):
                return
            if not lock:
                current = self._retention_sync(digest, versions, lock)
                if current is None or current < until:
                    self.client.put_object(
                        Bucket=self.bucket,
                        Key=self._lock_key(digest, "retain-until"),
                        Body=until.isoformat().encode(),
                    )
                return
            for version_id in versions:
                mode, current = self._version_retention(key, version_id)
                if current is not None and current >= until:
                    continue
                self.client.put_object_retention(
                    Bucket=self.bucket,
                    Key=key,
                    VersionId=version_id,
                    Retention={"Mode": mode or self.retention_mode, "RetainUntilDate": until},
                )

        await self._run("set retention", digest, set_retention)

    async def retention(self, digest: str) -> datetime | None:
        self.key_for(digest)
        lock = await self.object_lock_enabled()

        def retention() -> datetime | None:
            return self._retention_sync(digest, self._require_versions(digest), lock)

        return await self._run("get retention", digest, retention)

    def _retention_sync(self, digest: str, versions: list[str], lock: bool) -> datetime | None:
        if not lock:
            raw = self._sidecar(digest, "retain-until")
            if raw is None:
                return None
            try:
                return datetime.fromisoformat(raw.decode().strip()).astimezone(UTC)
            except ValueError as e:
                # Fail closed: an unreadable retention record must not unlock the object.
                raise StoreError(f"unreadable retention record for {digest}: {raw[:64]!r}") from e
        key = self.key_for(digest)
        dates = [self._version_retention(key, v)[1] for v in versions]
        return max((d for d in dates if d is not None), default=None)

    def _version_retention(
        self, key: str, version_id: str
    ) -> tuple[RetentionMode | None, datetime | None]:
        try:
            response = self.client.get_object_retention(
                Bucket=self.bucket, Key=key, VersionId=version_id
            )
        except ClientError as e:
            if _error_code(e) in _NO_RETENTION:
                return None, None
            raise
        retention = response.get("Retention", {})
        until = retention.get("RetainUntilDate")
        return retention.get("Mode"), until.astimezone(UTC) if until is not None else None
