"""The anchor log on both kinds of location: a local directory and S3 (SeaweedFS, Object Lock);
its location kept apart from the artifact store's."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from devstack.seaweedfs import SeaweedFS
from models.anchor import Anchor
from models.digest import sha256_digest
from models.errors import ConfigurationError
from runtime.ports import ArtifactStore
from stores.anchors import S3Access, anchor_log_at, anchor_store, open_anchor_log
from tests.fixtures_s3 import unique_bucket_name
from tests.tamper.conftest import ANCHOR_KEYS

AT = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest) -> ArtifactStore:
    name = "local_artifact_store" if request.param == "local" else "s3_artifact_store"
    return request.getfixturevalue(name)


async def test_anchor_log_appends_finds_the_latest_and_verifies(store: ArtifactStore) -> None:
    log = open_anchor_log(store, ANCHOR_KEYS)
    heads = [sha256_digest(f"head {i}".encode()) for i in range(3)]
    first = await log.append(Anchor(run_id="run-a", sequence=5, head=heads[0], at=AT))
    await log.append(Anchor(run_id="run-b", sequence=2, head=heads[1], at=AT))
    third = await log.append(Anchor(run_id="run-a", sequence=9, head=heads[2], at=AT))
    assert (first.index, third.index) == (1, 3)
    latest = await log.latest("run-a")
    assert latest is not None and latest.anchor.head == heads[2] and latest.hash == third.hash
    assert await log.latest("run-c") is None
    entries, problems = await log.verify()
    assert [e.index for e in entries] == [1, 2, 3] and not problems
    assert all(e.signed and ANCHOR_KEYS.check(e) for e in entries)
    reading = await log.run_anchor("run-a")
    assert reading.entry == third and reading.signed and not reading.problems
    # write-once: the same index is never written again
    assert not await log.objects.create("log/000000000001.json", b"{}")


def test_every_lookup_table_is_checked_against_the_chain() -> None:
    """A lookup table the ledger writes but verification does not check would be trusted
    unchecked: the two lists must name the same tables, keys and looked-up columns."""
    from stores.sql.projections import PROJECTIONS
    from stores.sql.run_check import PROJECTION_RULES

    written = {p.table.name: p.key_column for p in PROJECTIONS.values()}
    checked = {r.table: r.key_column for r in PROJECTION_RULES}
    assert checked == written


def test_the_anchor_location_is_apart_from_the_artifact_store(tmp_path: Path) -> None:
    artifacts = str(tmp_path / "artifacts")
    for inside in (artifacts, f"{artifacts}/anchors", "s3://bucket/a"):
        other = "s3://bucket/b" if inside.startswith("s3") else artifacts
        with pytest.raises(ConfigurationError, match="overlaps the artifact store"):
            anchor_store(inside, other)
    assert anchor_store(str(tmp_path / "anchors"), artifacts).location.endswith("anchors")


async def test_an_anchor_bucket_of_its_own(seaweedfs: SeaweedFS) -> None:
    """``REPLAYBOOK_ANCHORS=s3://…``: a second bucket, created with Object Lock, entries signed."""
    s3 = S3Access(seaweedfs.endpoint_url, seaweedfs.access_key, seaweedfs.secret_key)
    artifacts = f"s3://{unique_bucket_name()}/artifacts"
    log = anchor_log_at(
        f"s3://{unique_bucket_name()}/a", ANCHOR_KEYS, artifacts_location=artifacts, s3=s3
    )
    await log.ensure_location()
    entry = await log.append(Anchor(run_id="run-s", sequence=1, head=sha256_digest(b"h"), at=AT))
    assert ANCHOR_KEYS.check(entry) and (await log.run_anchor("run-s")).entry == entry
    assert await log.objects.store.object_lock_enabled()  # type: ignore[attr-defined]


def test_a_process_given_only_the_public_key_writes_no_anchor(tmp_path: Path) -> None:
    """A replay worker holds no secret: it checks anchors and signs none (no dev key made)."""
    from stores.anchor_signing import load_anchor_keys
    from stores.case_signing import public_pem
    from stores.config import AnchorSettings

    pem = tmp_path / "anchor.pem"
    pem.write_bytes(public_pem(ANCHOR_KEYS.trusted))
    checking = load_anchor_keys(AnchorSettings.model_validate({"public_key": str(pem)}), tmp_path)
    assert not checking.can_sign and checking.key_id == ANCHOR_KEYS.key_id
    assert not (tmp_path / "anchor-signing.key").exists()
    development = load_anchor_keys(AnchorSettings(), tmp_path)
    assert development.can_sign and development.key_id != ANCHOR_KEYS.key_id
    assert (tmp_path / "anchor-signing.key").stat().st_mode & 0o777 == 0o600
