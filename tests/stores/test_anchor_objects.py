"""The anchor log's write-once objects (``stores.anchor_objects``): on S3 (SeaweedFS, Object
Lock) a writer racing another between "is it there?" and the put loses, and on a local
directory an entry appears whole under its name or not at all."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from devstack.seaweedfs import SeaweedFS
from models.anchor import Anchor
from models.digest import sha256_digest
from stores.anchor_objects import LocalObjects, Objects, S3Objects
from stores.anchors import AnchorLog
from tests.fixtures_s3 import make_s3_store, unique_bucket_name
from tests.tamper.conftest import ANCHOR_KEYS

NAME = "log/000000000001.json"


async def _s3_objects(seaweedfs: SeaweedFS) -> S3Objects:
    store = make_s3_store(seaweedfs, unique_bucket_name(), prefix="")
    await store.ensure_bucket(object_lock=True)
    assert await store.object_lock_enabled()
    return S3Objects(store)


@pytest.fixture(params=["local", "s3"])
async def objects(request: pytest.FixtureRequest, tmp_path: Path) -> Objects:
    if request.param == "local":
        return LocalObjects(tmp_path / "anchors")
    return await _s3_objects(request.getfixturevalue("seaweedfs"))


async def test_an_attacker_racing_the_s3_writer_between_check_and_put_wins_alone(
    seaweedfs: SeaweedFS, s3_client: Any
) -> None:
    """The attacker's object lands after the writer could have looked for it and before its
    put reaches the server (botocore's before-call event, a real interleaving on the real
    server): the writer must lose, not overwrite it and believe it wrote the entry."""
    objects = await _s3_objects(seaweedfs)
    key = objects.base + NAME
    raced: list[str] = []

    def attacker_puts_first(**_: Any) -> None:
        if not raced:
            raced.append(key)
            s3_client.put_object(Bucket=objects.store.bucket, Key=key, Body=b"attacker")

    events = objects.store.client.meta.events
    events.register("before-call.s3.PutObject", attacker_puts_first)
    try:
        created = await objects.create(NAME, b"writer")
    finally:
        events.unregister("before-call.s3.PutObject", attacker_puts_first)
    assert raced == [key]
    assert created is False
    assert await objects.read(NAME) == b"attacker"
    versions = s3_client.list_object_versions(Bucket=objects.store.bucket, Prefix=key)
    assert len(versions.get("Versions", [])) == 1  # the writer's put wrote no version either


async def test_the_first_s3_entry_learns_that_the_server_refuses_a_second_put(
    seaweedfs: SeaweedFS, s3_client: Any
) -> None:
    """Its bytes put twice, once: SeaweedFS refuses the second (no read-back needed after
    that), and leaves one version of the entry."""
    objects = await _s3_objects(seaweedfs)
    assert objects.conditional_writes is None
    assert await objects.create(NAME, b"entry")
    assert objects.conditional_writes is True
    assert await objects.read(NAME) == b"entry"
    versions = s3_client.list_object_versions(Bucket=objects.store.bucket, Prefix=NAME)
    assert len(versions.get("Versions", [])) == 1
    assert not await objects.create(NAME, b"another")


async def test_concurrent_writers_of_one_name_one_wins(objects: Objects) -> None:
    datas = [f"writer {i}".encode() for i in range(8)]
    created = await asyncio.gather(*(objects.create(NAME, d) for d in datas))
    assert sum(created) == 1
    assert await objects.read(NAME) == datas[created.index(True)]


async def test_concurrent_appends_make_one_valid_log(objects: Objects) -> None:
    """Appends racing for the same index: each entry written once, every copy the log's own."""
    log = AnchorLog(objects, ANCHOR_KEYS)
    at = datetime(2026, 12, 2, tzinfo=UTC)
    anchors = [
        Anchor(run_id=f"run-{i}", sequence=1, head=sha256_digest(f"h{i}".encode()), at=at)
        for i in range(6)
    ]
    entries = await asyncio.gather(*(log.append(a) for a in anchors))
    assert sorted(e.index for e in entries) == list(range(1, 7))
    logged, problems = await log.verify()
    assert len(logged) == 6 and problems == []


def test_a_local_writer_that_dies_half_way_leaves_no_entry(tmp_path: Path) -> None:
    """The writing process may write 16 bytes of its entry and no more (a full disk, a crash):
    no short entry may hold the index (it would read as a broken entry, and be written never
    again)."""
    root = tmp_path / "anchors"
    script = textwrap.dedent(
        f"""
        import asyncio, resource, signal
        from pathlib import Path
        from stores.anchor_objects import LocalObjects
        objects = LocalObjects(Path({str(root)!r}))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, not a killed process
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, resource.RLIM_INFINITY))
        asyncio.run(objects.create({NAME!r}, b"x" * 4096))
        """
    )
    died = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert died.returncode != 0 and "File too large" in died.stderr, died.stderr[-500:]
    assert not (root / NAME).exists()
    assert [p.name for p in (root / "log").iterdir()] == []  # nor its temporary file
    objects = LocalObjects(root)
    assert asyncio.run(objects.create(NAME, b"y" * 4096))
    assert asyncio.run(objects.read(NAME)) == b"y" * 4096
    assert (root / NAME).stat().st_mode & 0o777 == 0o444
