"""One contract for every ``ArtifactStore`` backend, run against a local directory and a real
SeaweedFS (S3 with Object Lock); then what the S3 server itself enforces, as observed on
SeaweedFS 4.48."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.ports import free_ports
from devstack.seaweedfs import SeaweedFS, start_seaweedfs
from models.digest import sha256_digest
from models.errors import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ConfigurationError,
    EvidenceLockedError,
    InvalidInputError,
    StoreError,
)
from runtime.ports import ArtifactStore
from stores.artifacts import LocalArtifactStore, S3ArtifactStore, open_artifact_store
from stores.artifacts.local import INLINE_IO_BYTES
from tests.fixtures_s3 import make_s3_store, unique_bucket_name


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest) -> ArtifactStore:
    return request.getfixturevalue(f"{request.param}_artifact_store")


# -- helpers that act behind the store's back --------------------------------------------------


def corrupt(store: ArtifactStore, digest: str, data: bytes) -> None:
    """Overwrite the stored bytes of ``digest`` without going through the store."""
    if isinstance(store, LocalArtifactStore):
        path = store.path_for(digest)
        path.chmod(0o644)
        path.write_bytes(data)
    else:
        assert isinstance(store, S3ArtifactStore)
        store.client.put_object(Bucket=store.bucket, Key=store.key_for(digest), Body=data)


def stored_copies(store: ArtifactStore, digest: str) -> int:
    """How many stored objects back ``digest`` (files incl. stray temp files; S3 versions)."""
    if isinstance(store, LocalArtifactStore):
        path = store.path_for(digest)
        return len(list(path.parent.iterdir())) if path.parent.exists() else 0
    assert isinstance(store, S3ArtifactStore)
    response = store.client.list_object_versions(Bucket=store.bucket, Prefix=store.key_for(digest))
    return len(response.get("Versions", []))


def version_ids(store: S3ArtifactStore, digest: str) -> list[str]:
    response = store.client.list_object_versions(Bucket=store.bucket, Prefix=store.key_for(digest))
    return [v["VersionId"] for v in response.get("Versions", [])]


def server_error(e: ClientError) -> tuple[str, int]:
    return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]


def future(days: float = 1) -> datetime:
    return (datetime.now(UTC) + timedelta(days=days)).replace(microsecond=0)


# -- the contract ------------------------------------------------------------------------------


async def test_is_an_artifact_store(store: ArtifactStore) -> None:
    assert isinstance(store, ArtifactStore)
    assert store.location.startswith(("file:///", "s3://"))
    assert store.enforced_by_backend() is isinstance(store, S3ArtifactStore)


async def test_put_get_round_trip(store: ArtifactStore) -> None:
    data = b'{"role": "assistant", "content": "hello"}'
    digest = await store.put(data)
    assert digest == sha256_digest(data)
    assert await store.exists(digest)
    assert await store.get(digest) == data


async def test_put_is_idempotent(store: ArtifactStore) -> None:
    data = b"same bytes, same key, one object"
    first = await store.put(data)
    second = await store.put(data)
    concurrent = await asyncio.gather(*(store.put(data) for _ in range(5)))
    assert {first, second, *concurrent} == {sha256_digest(data)}
    assert stored_copies(store, first) == 1
    assert await store.get(first) == data


async def test_empty_bytes(store: ArtifactStore) -> None:
    digest = await store.put(b"")
    assert digest == sha256_digest(b"")
    assert await store.get(digest) == b""


async def test_five_megabytes(store: ArtifactStore) -> None:
    data = os.urandom(5 * 1024 * 1024)
    digest = await store.put(data)
    assert await store.get(digest) == data


async def test_absent_digest(store: ArtifactStore) -> None:
    digest = sha256_digest(b"never stored")
    assert not await store.exists(digest)
    with pytest.raises(ArtifactNotFoundError, match=digest):
        await store.get(digest)
    for call in (store.legal_hold(digest), store.retention(digest)):
        with pytest.raises(ArtifactNotFoundError):
            await call
    with pytest.raises(ArtifactNotFoundError):
        await store.set_legal_hold(digest, True)
    with pytest.raises(ArtifactNotFoundError):
        await store.set_retention(digest, future())
    await store.delete(digest)  # deleting what is not there is a no-op


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "sha256:",
        "sha256:abc",
        "sha256:" + "A" * 64,
        "sha256:" + "g" * 64,
        "SHA256:" + "a" * 64,
        "md5:" + "a" * 32,
        "a" * 64,
        "sha256:../../../../etc/passwd",
        "sha256:" + "a" * 64 + "\n",
    ],
)
async def test_malformed_digest_is_refused(store: ArtifactStore, bad: str) -> None:
    calls = [
        lambda: store.get(bad),
        lambda: store.exists(bad),
        lambda: store.delete(bad),
        lambda: store.set_legal_hold(bad, True),
        lambda: store.legal_hold(bad),
        lambda: store.set_retention(bad, future()),
        lambda: store.retention(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidInputError, match="not a sha256 digest"):
            await call()


async def test_put_refuses_non_bytes(store: ArtifactStore) -> None:
    with pytest.raises(InvalidInputError):
        await store.put("text is not bytes")  # type: ignore[arg-type]


async def test_corrupted_object_raises_and_never_returns_bad_bytes(store: ArtifactStore) -> None:
    data = b"the original evidence"
    digest = await store.put(data)
    tampered = b"the tampered evidence"
    corrupt(store, digest, tampered)

    with pytest.raises(ArtifactIntegrityError) as caught:
        await store.get(digest)
    message = str(caught.value)
    assert digest in message
    assert sha256_digest(tampered) in message  # names the hash the bytes actually have

    # Putting the right bytes again repairs the object (S3: as a new, latest version).
    assert await store.put(data) == digest
    assert await store.get(digest) == data


async def test_legal_hold_blocks_delete(store: ArtifactStore) -> None:
    data = b"held evidence"
    digest = await store.put(data)
    assert await store.legal_hold(digest) is False
    await store.set_legal_hold(digest, True)
    assert await store.legal_hold(digest) is True

    with pytest.raises(EvidenceLockedError, match="legal hold") as caught:
        await store.delete(digest)
    assert digest in str(caught.value)
    assert await store.get(digest) == data

    await store.set_legal_hold(digest, False)
    assert await store.legal_hold(digest) is False
    await store.delete(digest)
    assert not await store.exists(digest)
    assert stored_copies(store, digest) == 0
    with pytest.raises(ArtifactNotFoundError):
        await store.get(digest)


async def test_retention_blocks_delete(store: ArtifactStore) -> None:
    data = b"retained evidence"
    digest = await store.put(data)
    assert await store.retention(digest) is None
    until = future(days=30)
    await store.set_retention(digest, until)
    assert await store.retention(digest) == until

    with pytest.raises(EvidenceLockedError, match="retained until") as caught:
        await store.delete(digest)
    assert until.isoformat() in str(caught.value)
    assert await store.get(digest) == data


async def test_retention_is_only_ever_extended(store: ArtifactStore) -> None:
    digest = await store.put(b"retention goes one way")
    later = future(days=60)
    await store.set_retention(digest, later)

    await store.set_retention(digest, future(days=1))  # shorter: no effect
    assert await store.retention(digest) == later
    await store.set_retention(digest, datetime.now(UTC) - timedelta(days=1))  # past: no effect
    assert await store.retention(digest) == later

    even_later = future(days=90)
    await store.set_retention(digest, even_later)
    assert await store.retention(digest) == even_later


async def test_retention_rounds_up_to_whole_seconds_in_utc(store: ArtifactStore) -> None:
    digest = await store.put(b"sub-second retention")
    until = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=250_000)
    await store.set_retention(digest, until.astimezone(timezone(timedelta(hours=2))))
    stored = await store.retention(digest)
    assert stored is not None
    assert stored.utcoffset() == timedelta(0)
    assert stored == until.replace(microsecond=0) + timedelta(seconds=1)


async def test_retention_needs_an_aware_datetime(store: ArtifactStore) -> None:
    digest = await store.put(b"naive dates are ambiguous")
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        await store.set_retention(digest, datetime.now() + timedelta(days=1))


async def test_hold_and_retention_are_both_named(store: ArtifactStore) -> None:
    digest = await store.put(b"doubly locked")
    await store.set_legal_hold(digest, True)
    await store.set_retention(digest, future())
    with pytest.raises(EvidenceLockedError, match=r"legal hold and it is retained until"):
        await store.delete(digest)


async def test_exists_and_delete(store: ArtifactStore) -> None:
    digest = await store.put(b"short-lived")
    assert await store.exists(digest)
    await store.delete(digest)
    assert not await store.exists(digest)
    await store.delete(digest)  # again: no-op


# -- local backend specifics -------------------------------------------------------------------


async def test_local_layout(local_artifact_store: LocalArtifactStore) -> None:
    digest = await local_artifact_store.put(b"where does it go")
    hex_ = digest.removeprefix("sha256:")
    path = local_artifact_store.root / "sha256" / hex_[:2] / hex_[2:]
    assert local_artifact_store.path_for(digest) == path
    assert path.read_bytes() == b"where does it go"
    assert [p.name for p in path.parent.iterdir()] == [hex_[2:]]  # no temp file left behind
    assert local_artifact_store.location == local_artifact_store.root.as_uri()


@pytest.mark.parametrize("size", [100, INLINE_IO_BYTES, INLINE_IO_BYTES + 1, 300_000])
async def test_local_reads_inline_and_in_a_thread_alike(
    local_artifact_store: LocalArtifactStore, size: int
) -> None:
    """Small objects are read (and found already stored) on the event loop's thread, larger
    ones in a worker thread: both keep the file untouched when intact, refuse a corrupted
    copy and let a put repair it."""
    store = local_artifact_store
    data = os.urandom(size)
    digest = await store.put(data)
    path = store.path_for(digest)
    inode = path.stat().st_ino
    assert await store.put(data) == digest
    assert path.stat().st_ino == inode  # an intact copy is not written again
    assert await store.get(digest) == data
    corrupt(store, digest, os.urandom(size))
    with pytest.raises(ArtifactIntegrityError):
        await store.get(digest)
    assert await store.put(data) == digest
    assert path.stat().st_ino != inode  # the corrupted copy was replaced
    assert await store.get(digest) == data


async def test_local_put_of_a_digest_known_stored_reads_nothing(tmp_path: Path) -> None:
    """A store remembers what it wrote: a put of the same bytes again returns at once (no
    file system call on the event loop's thread), even over a copy changed behind its back;
    a get refuses that copy and makes the store forget it, so the next put repairs it; a
    delete forgets too, so a put after it writes the object again."""
    store = LocalArtifactStore(tmp_path / "artifacts")
    data = os.urandom(200)
    digest = await store.put(data)
    path = store.path_for(digest)
    corrupt(store, digest, b"changed behind the store's back")
    inode = path.stat().st_ino
    assert await store.put(data) == digest
    assert path.stat().st_ino == inode  # known stored: not read, not written
    with pytest.raises(ArtifactIntegrityError):
        await store.get(digest)
    assert await store.put(data) == digest
    assert path.stat().st_ino != inode and await store.get(digest) == data
    await store.delete(digest)
    assert await store.put(data) == digest and await store.get(digest) == data
    # another store on the same directory checks the file for itself
    corrupt(store, digest, b"changed again")
    assert await LocalArtifactStore(tmp_path / "artifacts").put(data) == digest
    assert await store.get(digest) == data


class HeldWrites(LocalArtifactStore):
    """A local store whose writes (on the writer threads) wait for ``gate``, counted."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gate = threading.Event()
        self.writes = 0

    def _put_sync(self, data: bytes, digest: str) -> str:
        self.writes += 1
        if not self.gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        return super()._put_sync(data, digest)


async def test_local_puts_of_bytes_being_written_wait_for_that_write(tmp_path: Path) -> None:
    """A put of bytes another put is writing waits for that write (the renamed file is not
    durable before its directory is synced) and writes nothing of its own; cancelling one
    waiter stops neither the write nor the other waiter."""
    store = HeldWrites(tmp_path / "artifacts")
    try:
        first = asyncio.ensure_future(store.put(b"same"))
        second = asyncio.ensure_future(store.put(b"same"))
        cancelled = asyncio.ensure_future(store.put(b"same"))
        await asyncio.sleep(0)  # one loop turn: all three are waiting for the write
        cancelled.cancel()
        assert not first.done() and not second.done()
    finally:
        store.gate.set()
    digest = sha256_digest(b"same")
    assert await asyncio.wait_for(first, 60) == await asyncio.wait_for(second, 60) == digest
    assert cancelled.cancelled()
    assert store.writes == 1
    assert await store.get(digest) == b"same"
    path = store.path_for(digest)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind


@pytest.mark.parametrize("size", [100, INLINE_IO_BYTES + 1])
async def test_local_put_replaces_a_short_copy_a_crash_left(tmp_path: Path, size: int) -> None:
    """A new object is written in place, so a put cut short by a crash leaves a short file at
    its path (its put never returned: nothing references it). No later process takes it for
    the object: a get refuses it, and a put (a small one checks on the loop's thread, a large
    one on a writer thread) replaces it whole."""
    root = tmp_path / "artifacts"
    data = os.urandom(size)
    digest = sha256_digest(data)
    path = LocalArtifactStore(root).path_for(digest)
    path.parent.mkdir(parents=True)
    path.write_bytes(data[: size // 2])
    path.chmod(0o444)
    inode = path.stat().st_ino
    store = LocalArtifactStore(root)  # a process started after the crash
    with pytest.raises(ArtifactIntegrityError):
        await store.get(digest)
    assert await store.put(data) == digest
    assert path.stat().st_ino != inode and path.read_bytes() == data
    assert oct(path.stat().st_mode & 0o777) == oct(0o444)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    assert await LocalArtifactStore(root).get(digest) == data


async def test_local_put_keeps_an_intact_copy_another_process_wrote(tmp_path: Path) -> None:
    """A large put (checked on a writer thread) that finds the object written by another
    process keeps that file (the same inode), syncs it, and writes nothing of its own."""
    root = tmp_path / "artifacts"
    data = os.urandom(INLINE_IO_BYTES + 1)
    digest = await LocalArtifactStore(root).put(data)
    path = LocalArtifactStore(root).path_for(digest)
    inode = path.stat().st_ino
    assert await LocalArtifactStore(root).put(data) == digest
    assert path.stat().st_ino == inode
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize("writer", ["native", "python"])
def test_local_failed_write_leaves_no_short_object(tmp_path: Path, writer: str) -> None:
    """A write that fails half-way (the file size limit, a real EFBIG from the kernel, in a
    child process) is reported and removes what it wrote: no short file at the path — by the
    C extension and by the pure-Python path alike."""
    root = tmp_path / "artifacts"
    data = os.urandom(200_000)
    code = (
        "import asyncio, resource, signal, sys\n"
        "from stores.artifacts import LocalArtifactStore, local\n"
        "from models.errors import StoreError\n"
        + ("local._create_synced = local._create_synced_py\n" if writer == "python" else "")
        + "assert local._create_synced.__name__.endswith(sys.argv[1])\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))\n"
        "data = sys.stdin.buffer.read()\n"
        "try:\n"
        f"    asyncio.run(LocalArtifactStore({str(root)!r}).put(data))\n"
        "except StoreError as e:\n"
        "    print('refused:', e)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "_py" if writer == "python" else "_native"],
        input=data,
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert b"refused: cannot write artifact" in done.stdout
    path = LocalArtifactStore(root).path_for(sha256_digest(data))
    assert not path.exists()
    assert list(path.parent.iterdir()) == []


def test_local_failed_write_keeps_a_whole_copy_put_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after another process found its short file and replaced it whole
    removes nothing: the whole copy is an object someone may already reference. (On the
    pure-Python path, where a failure can be injected between the system calls; the C
    extension makes the same identity check.)"""
    from stores.artifacts import local

    monkeypatch.setattr(local, "_create_synced", local._create_synced_py)
    data = os.urandom(50_000)
    path = str(LocalArtifactStore(tmp_path).path_for(sha256_digest(data)))
    real_fchmod = os.fchmod

    def replaced_then_failing(fd: int, mode: int) -> None:
        monkeypatch.setattr(os, "fchmod", real_fchmod)
        local._atomic_write(path, data)  # the other process's whole copy, renamed over ours
        raise OSError(errno.ENOSPC, "no space left on device")

    monkeypatch.setattr(os, "fchmod", replaced_then_failing)
    with pytest.raises(OSError, match="no space"):
        local._write_new(path, data)
    assert Path(path).read_bytes() == data


def test_the_durable_write_extension_is_built_and_in_use() -> None:
    # make install compiles it (setup.py); a failed build would leave the Python path in use
    from stores.artifacts import local

    assert local.NATIVE_WRITES and local._create_synced is local._create_synced_native


@pytest.mark.parametrize("writer", ["native", "python"])
def test_local_new_file_writes_are_exclusive_and_read_only_whatever_the_umask(
    tmp_path: Path, writer: str
) -> None:
    from stores.artifacts import local

    create = local._create_synced_native if writer == "native" else local._create_synced_py
    target = str(tmp_path / "ab" / "object")
    with pytest.raises(FileNotFoundError) as missing:
        create(target, b"first", 0o444, str(tmp_path / "ab"))
    assert missing.value.filename == target
    old = os.umask(0o077)  # the mode is exact, whatever the umask
    try:
        os.mkdir(tmp_path / "ab")
        assert create(target, b"first", 0o444, str(tmp_path / "ab")) is True
    finally:
        os.umask(old)
    assert Path(target).read_bytes() == b"first"
    assert oct(os.stat(target).st_mode & 0o777) == oct(0o444)
    assert create(target, b"second", 0o444, str(tmp_path / "ab")) is False
    assert Path(target).read_bytes() == b"first"  # nothing written over it


@pytest.mark.parametrize("writer", ["native", "python"])
def test_local_file_size_sees_regular_files_only(
    tmp_path: Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stores.artifacts import local

    if writer == "python":
        monkeypatch.setattr(local, "_durable_native", None)
    (tmp_path / "object").write_bytes(b"x" * 1234)
    assert local._file_size(str(tmp_path / "object")) == 1234
    assert local._file_size(str(tmp_path / "missing")) == -1
    assert local._file_size(str(tmp_path)) == -1  # a directory is no object


async def test_local_put_reports_a_failed_write(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    root.mkdir()
    (root / "sha256").write_text("a file where the directory should be")
    with pytest.raises(StoreError, match="cannot write artifact"):
        await LocalArtifactStore(root).put(b"nowhere to go")


# -- what the S3 server (SeaweedFS 4.48) enforces by itself ------------------------------------


async def test_s3_server_refuses_deleting_a_held_version(
    s3_artifact_store: S3ArtifactStore,
) -> None:
    store = s3_artifact_store
    data = b"held at the server"
    digest = await store.put(data)
    await store.set_legal_hold(digest, True)
    [version] = version_ids(store, digest)

    with pytest.raises(ClientError) as caught:
        store.client.delete_object(
            Bucket=store.bucket, Key=store.key_for(digest), VersionId=version
        )
    assert server_error(caught.value) == ("AccessDenied", 403)
    # Bypassing governance does not lift a legal hold.
    with pytest.raises(ClientError):
        store.client.delete_object(
            Bucket=store.bucket,
            Key=store.key_for(digest),
            VersionId=version,
            BypassGovernanceRetention=True,
        )
    # A batch delete reports the refusal per key.
    response = store.client.delete_objects(
        Bucket=store.bucket,
        Delete={"Objects": [{"Key": store.key_for(digest), "VersionId": version}]},
    )
    assert [e["Code"] for e in response["Errors"]] == ["AccessDenied"]
    assert await store.get(digest) == data


async def test_s3_plain_delete_only_hides_a_held_object(s3_artifact_store: S3ArtifactStore) -> None:
    """A DELETE without a version id is allowed: it adds a delete marker and the held version
    survives. The store then reports the object absent, but refuses to delete it."""
    store = s3_artifact_store
    data = b"hidden, not gone"
    digest = await store.put(data)
    await store.set_legal_hold(digest, True)
    [version] = version_ids(store, digest)

    response = store.client.delete_object(Bucket=store.bucket, Key=store.key_for(digest))
    assert response["DeleteMarker"] is True
    assert not await store.exists(digest)
    with pytest.raises(ArtifactNotFoundError):
        await store.get(digest)
    assert await store.legal_hold(digest) is True
    with pytest.raises(EvidenceLockedError):
        await store.delete(digest)
    held = store.client.get_object(
        Bucket=store.bucket, Key=store.key_for(digest), VersionId=version
    )
    assert held["Body"].read() == data


async def test_s3_legal_hold_covers_every_version(s3_artifact_store: S3ArtifactStore) -> None:
    store = s3_artifact_store
    data = b"two versions, one digest"
    digest = await store.put(data)
    corrupt(store, digest, b"junk")
    await store.put(data)  # repair: a third version
    assert stored_copies(store, digest) == 3
    await store.set_legal_hold(digest, True)
    key = store.key_for(digest)
    for version in version_ids(store, digest):
        hold = store.client.get_object_legal_hold(Bucket=store.bucket, Key=key, VersionId=version)
        assert hold["LegalHold"]["Status"] == "ON"


async def test_s3_governance_retention_at_the_server(s3_artifact_store: S3ArtifactStore) -> None:
    store = s3_artifact_store
    digest = await store.put(b"governance retention")
    until = future(days=10)
    await store.set_retention(digest, until)
    key = store.key_for(digest)
    [version] = version_ids(store, digest)

    # Shortening at the server is refused…
    with pytest.raises(ClientError) as caught:
        store.client.put_object_retention(
            Bucket=store.bucket,
            Key=key,
            VersionId=version,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": future(days=1)},
        )
    assert server_error(caught.value) == ("AccessDenied", 403)
    # …and so is deleting the version,
    with pytest.raises(ClientError) as caught:
        store.client.delete_object(Bucket=store.bucket, Key=key, VersionId=version)
    assert server_error(caught.value) == ("AccessDenied", 403)
    assert await store.retention(digest) == until
    # but GOVERNANCE lets a privileged identity bypass it (what tests and admins rely on).
    store.client.delete_object(
        Bucket=store.bucket, Key=key, VersionId=version, BypassGovernanceRetention=True
    )
    assert not await store.exists(digest)


async def test_s3_compliance_retention_cannot_be_bypassed(
    seaweedfs: SeaweedFS, s3_artifact_store: S3ArtifactStore
) -> None:
    store = make_s3_store(seaweedfs, s3_artifact_store.bucket, retention_mode="COMPLIANCE")
    digest = await store.put(b"compliance retention")
    await store.set_retention(digest, future(days=1))
    key = store.key_for(digest)
    [version] = version_ids(store, digest)
    retention = store.client.get_object_retention(Bucket=store.bucket, Key=key, VersionId=version)
    assert retention["Retention"]["Mode"] == "COMPLIANCE"

    with pytest.raises(ClientError) as caught:
        store.client.delete_object(
            Bucket=store.bucket, Key=key, VersionId=version, BypassGovernanceRetention=True
        )
    assert server_error(caught.value) == ("AccessDenied", 403)

    # A GOVERNANCE store extending it keeps COMPLIANCE (the server refuses a downgrade).
    later = future(days=2)
    await s3_artifact_store.set_retention(digest, later)
    retention = store.client.get_object_retention(Bucket=store.bucket, Key=key, VersionId=version)
    assert retention["Retention"]["Mode"] == "COMPLIANCE"
    assert await store.retention(digest) == later


async def test_s3_server_verifies_the_upload_checksum(s3_artifact_store: S3ArtifactStore) -> None:
    store = s3_artifact_store
    digest = sha256_digest(b"claimed")
    with pytest.raises(ClientError) as caught:
        store.client.put_object(
            Bucket=store.bucket,
            Key=store.key_for(digest),
            Body=b"actual",
            ChecksumSHA256=base64.b64encode(hashlib.sha256(b"claimed").digest()).decode(),
        )
    assert server_error(caught.value) == ("BadDigest", 400)
    assert not await store.exists(digest)


async def test_s3_without_object_lock_refuses_in_code_only(seaweedfs: SeaweedFS) -> None:
    store = make_s3_store(seaweedfs, unique_bucket_name())
    await store.ensure_bucket(object_lock=False)
    assert store.enforced_by_backend() is False

    data = b"no object lock here"
    digest = await store.put(data)
    await store.set_legal_hold(digest, True)
    await store.set_retention(digest, future())
    assert await store.legal_hold(digest) is True
    with pytest.raises(EvidenceLockedError):
        await store.delete(digest)
    assert await store.get(digest) == data

    # The server does not enforce anything: a raw delete succeeds.
    store.client.delete_object(Bucket=store.bucket, Key=store.key_for(digest))
    assert not await store.exists(digest)

    other = await store.put(b"released")
    await store.set_legal_hold(other, True)
    await store.set_legal_hold(other, False)
    await store.delete(other)
    assert not await store.exists(other)


async def test_s3_ensure_bucket_is_idempotent(s3_artifact_store: S3ArtifactStore) -> None:
    await s3_artifact_store.ensure_bucket(object_lock=True)
    assert await s3_artifact_store.object_lock_enabled() is True
    conf = s3_artifact_store.client.get_object_lock_configuration(Bucket=s3_artifact_store.bucket)
    assert conf["ObjectLockConfiguration"]["ObjectLockEnabled"] == "Enabled"
    versioning = s3_artifact_store.client.get_bucket_versioning(Bucket=s3_artifact_store.bucket)
    assert versioning["Status"] == "Enabled"


async def test_s3_key_layout(s3_artifact_store: S3ArtifactStore) -> None:
    digest = await s3_artifact_store.put(b"key layout")
    key = f"artifacts/sha256/{digest.removeprefix('sha256:')}"
    assert s3_artifact_store.key_for(digest) == key
    head = s3_artifact_store.client.head_object(Bucket=s3_artifact_store.bucket, Key=key)
    assert head["ContentLength"] == len(b"key layout")
    assert s3_artifact_store.location == f"s3://{s3_artifact_store.bucket}/artifacts"


async def test_s3_missing_bucket_is_a_configuration_error(seaweedfs: SeaweedFS) -> None:
    store = make_s3_store(seaweedfs, unique_bucket_name())
    with pytest.raises(ConfigurationError, match="does not exist"):
        await store.get(sha256_digest(b"x"))
    # SeaweedFS runs with -s3.autoCreateBucket=false: a put does not create the bucket.
    with pytest.raises(ConfigurationError, match="does not exist"):
        await store.put(b"x")


async def test_s3_unreachable_endpoint_is_a_store_error(seaweedfs: SeaweedFS) -> None:
    [port] = free_ports(1)
    store = S3ArtifactStore(
        "some-bucket",
        endpoint_url=f"http://127.0.0.1:{port}",
        access_key="k",
        secret_key="s",
        connect_timeout=1,
    )
    with pytest.raises(StoreError) as caught:
        await store.get(sha256_digest(b"x"))
    assert caught.value.__cause__ is not None


async def test_s3_requests_must_be_signed_with_the_configured_key(seaweedfs: SeaweedFS) -> None:
    def client(**kwargs: Any) -> Any:
        return boto3.session.Session().client(
            "s3", endpoint_url=seaweedfs.endpoint_url, region_name="us-east-1", **kwargs
        )

    client(
        aws_access_key_id=seaweedfs.access_key, aws_secret_access_key=seaweedfs.secret_key
    ).list_buckets()
    refused = {
        "wrong secret": client(
            aws_access_key_id=seaweedfs.access_key, aws_secret_access_key="wrong"
        ),
        "unknown key": client(aws_access_key_id="nobody", aws_secret_access_key="x"),
        "unsigned": client(config=Config(signature_version=UNSIGNED)),
    }
    codes = {}
    for name, c in refused.items():
        with pytest.raises(ClientError) as caught:
            c.list_buckets()
        codes[name] = server_error(caught.value)[0]
    assert codes == {
        "wrong secret": "SignatureDoesNotMatch",
        "unknown key": "InvalidAccessKeyId",
        "unsigned": "AccessDenied",
    }


def test_second_seaweedfs_does_not_collide(seaweedfs: SeaweedFS, tmp_path: Path) -> None:
    other = start_seaweedfs(tmp_path / "other", access_key="other-key", secret_key="other-secret")
    try:
        assert set(other.ports.values()).isdisjoint(seaweedfs.ports.values())
        assert len(set(other.ports.values())) == 10
        assert other.endpoint_url != seaweedfs.endpoint_url
        assert other.running() and seaweedfs.running()
    finally:
        other.stop(timeout=10)
    assert not other.running()
    assert seaweedfs.running()


def test_seaweedfs_refuses_a_taken_s3_port(seaweedfs: SeaweedFS, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="already in use"):
        start_seaweedfs(tmp_path / "clash", s3_port=seaweedfs.ports["s3"])


# -- open_artifact_store -----------------------------------------------------------------------


def test_open_local_specs(tmp_path: Path) -> None:
    for spec in (str(tmp_path), tmp_path.as_uri(), f"file://localhost{tmp_path}"):
        store = open_artifact_store(spec)
        assert isinstance(store, LocalArtifactStore)
        assert store.root == tmp_path
    relative = open_artifact_store("relative/artifacts")
    assert isinstance(relative, LocalArtifactStore)
    assert relative.root == Path.cwd() / "relative/artifacts"


def test_open_s3_specs() -> None:
    store = open_artifact_store(
        "s3://evidence-bucket/team/a/", s3_endpoint_url="http://127.0.0.1:1"
    )
    assert isinstance(store, S3ArtifactStore)
    assert (store.bucket, store.prefix) == ("evidence-bucket", "team/a")
    assert store.location == "s3://evidence-bucket/team/a"
    assert store.key_for("sha256:" + "ab" * 32) == "team/a/sha256/" + "ab" * 32
    bare = open_artifact_store("s3://evidence-bucket", s3_retention_mode="COMPLIANCE")
    assert isinstance(bare, S3ArtifactStore)
    assert (bare.prefix, bare.location, bare.retention_mode) == (
        "",
        "s3://evidence-bucket",
        "COMPLIANCE",
    )
    assert bare.key_for("sha256:" + "ab" * 32) == "sha256/" + "ab" * 32


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("s3://", "no bucket"),
        ("s3:///prefix", "no bucket"),
        ("s3://Bad_Bucket/x", "invalid S3 bucket name"),
        ("s3://ab/x", "invalid S3 bucket name"),
        ("s3://bucket:9000/x", "invalid S3 bucket name"),
        ("s3://bucket/a/../b", "invalid S3 key prefix"),
        ("s3://bucket/a//b", "invalid S3 key prefix"),
        ("s3://bucket/p?versionId=1", "must not have"),
        ("gs://bucket/prefix", "unsupported"),
        ("http://example.com/x", "unsupported"),
        ("file://otherhost/data", "must be local"),
        ("file://", "no absolute path"),
    ],
)
def test_open_refuses_bad_specs(spec: str, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        open_artifact_store(spec)


def test_open_refuses_bad_retention_mode() -> None:
    with pytest.raises(ConfigurationError, match="retention mode"):
        open_artifact_store("s3://evidence-bucket", s3_retention_mode="FOREVER")  # type: ignore[arg-type]
