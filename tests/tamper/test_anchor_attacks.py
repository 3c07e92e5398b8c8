"""Attacks on the anchor log by someone who can also write the anchor location but does not hold
the anchor signing key (issue 31): each must make ``verify`` name the place and a consumer
refuse the run, on SQLite and on PostgreSQL. Also: a log an earlier version wrote beside the
artifacts (unsigned) stays readable and is reported as such."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from models.anchor import ANCHOR_GENESIS, Anchor, anchor_entry
from models.digest import sha256_digest
from stores.anchor_signing import AnchorKeys
from stores.anchors import _run_dir, legacy_anchor_log, open_anchor_log
from stores.artifacts import LocalArtifactStore
from stores.case_signing import CaseSigningKey
from stores.sql.ledger import SqlLedger
from tests.tamper.conftest import ANCHOR_KEYS, T0, Recorded
from tests.tamper.test_tamper import broken, rechain


def _anchors_dir(rec: Recorded) -> Path:
    return rec.anchors.objects.root  # type: ignore[attr-defined]


def _problems(summary_of: object) -> list[str]:
    return [p.message for p in summary_of.problems]  # type: ignore[attr-defined]


async def test_rechain_and_forge_an_anchor_entry(recorded: Recorded) -> None:
    r, n = recorded.run_id, recorded.events
    head = await rechain(recorded)
    last = (await recorded.anchors.entries())[-1]
    attacker = AnchorKeys.of(CaseSigningKey(Ed25519PrivateKey.generate(), "attacker"))
    forged = attacker.signed_entry(
        Anchor(run_id=r, sequence=n, head=head, at=T0), last.index + 1, last.hash
    )
    data = forged.model_dump_json().encode()
    assert await recorded.anchors.objects.create(f"log/{forged.index:012d}.json", data)
    assert await recorded.anchors.objects.create(
        f"{_run_dir(r)}{n:012d}-{forged.index:012d}.json", data
    )
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {n}: anchor at sequence {n} says head"), summary
    messages = _problems(await recorded.ledger.verify(r))
    assert any(
        f"anchor log entry {forged.index} is forged: not signed by the anchor key" in m
        and f"run {r}" in m
        for m in messages
    ), messages
    _, problems = await recorded.anchors.verify()
    assert problems and "is forged" in problems[0].message


async def test_delete_the_newest_anchor_log_entries(recorded: Recorded) -> None:
    r = recorded.run_id
    for _ in range(2):
        await recorded.ledger.anchor(r)
    entries = await recorded.anchors.entries()
    assert len(entries) == 3
    for entry in entries[1:]:
        (_anchors_dir(recorded) / "log" / f"{entry.index:012d}.json").unlink()
    summary = await broken(recorded)
    assert summary.startswith(f"broken: anchor log entry 2 of run {r} is missing: the log "), (
        summary
    )
    assert "ends at entry 1 (its newest entries were deleted)" in summary
    _, problems = await recorded.anchors.verify()
    assert problems and "its newest entries were deleted" in problems[0].message


async def test_rechain_and_delete_the_runs_anchor_copies(recorded: Recorded) -> None:
    n = recorded.events
    await rechain(recorded)
    shutil.rmtree(_anchors_dir(recorded) / _run_dir(recorded.run_id))
    summary = await broken(recorded)
    assert summary.startswith(f"broken at sequence {n}: anchor at sequence {n} says head"), summary


async def test_a_legacy_unsigned_log_is_read_and_reported_unsigned(
    recorded: Recorded, tmp_path: Path
) -> None:
    """A run anchored only in the log an earlier version wrote beside the artifacts."""
    r, n = recorded.run_id, recorded.events
    head = (await recorded.ledger.events(r))[-1].hash
    old = anchor_entry(Anchor(run_id=r, sequence=n, head=head, at=T0), 1, ANCHOR_GENESIS)
    beside = recorded.artifacts.root / "anchors"
    for name in ("log/000000000001.json", f"{_run_dir(r)}{n:012d}-000000000001.json"):
        (beside / name).parent.mkdir(parents=True, exist_ok=True)
        (beside / name).write_text(old.model_dump_json())
    legacy = legacy_anchor_log(recorded.artifacts)
    fresh = open_anchor_log(LocalArtifactStore(tmp_path / "new"), ANCHOR_KEYS, legacy=legacy)
    ledger = SqlLedger(recorded.database, recorded.artifacts, anchors=fresh, group_commit=False)
    verification = await ledger.verify(r)
    assert verification.intact, verification.summary()
    assert verification.checked["anchors"] == 1 and verification.checked["unsigned_anchors"] == 1
    await rechain(recorded)
    assert not (await ledger.verify(r)).intact  # an unsigned anchor still catches a re-chain


def test_anchors_verify_checks_a_copy_offline(tmp_path: Path) -> None:
    """``anchors verify --public-key FILE COPY``: no database, no stack."""
    from typer.testing import CliRunner

    from cli.main import app
    from stores.case_signing import public_pem

    log = open_anchor_log(LocalArtifactStore(tmp_path / "anchors"), ANCHOR_KEYS)
    for i in range(3):
        head = sha256_digest(str(i).encode())
        asyncio.run(log.append(Anchor(run_id=f"run-{i}", sequence=i + 1, head=head, at=T0)))
    copy, pem = tmp_path / "copy", tmp_path / "anchor.pem"
    shutil.copytree(tmp_path / "anchors", copy)
    pem.write_bytes(public_pem(ANCHOR_KEYS.trusted))
    env = {"REPLAYBOOK_HOME": str(tmp_path / "elsewhere"), "REPLAYBOOK_DATABASE_URL": "nowhere"}
    args = ["anchors", "verify", "--public-key", str(pem), str(copy)]
    intact = CliRunner().invoke(app, args, env=env)
    assert intact.exit_code == 0, intact.output
    assert intact.stdout.startswith(f"intact: 3 anchors in {copy.as_uri()}/, signed by key ")
    (copy / "log" / "000000000003.json").unlink()
    cut = CliRunner().invoke(app, args, env=env)
    assert cut.exit_code == 1, cut.output
    assert "anchor log entry 3 (of run run-2) is missing" in cut.stdout
    assert "its newest entries were deleted" in cut.stdout
    other = tmp_path / "other.pem"
    other.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    forged = CliRunner().invoke(app, [*args[:3], str(other), str(copy)], env=env)
    assert forged.exit_code == 1 and "is forged: not signed by the anchor key" in forged.stdout
    (copy / "run-anchors").rename(tmp_path / "gone")  # the copies deleted too: a shorter log
    assert CliRunner().invoke(app, args, env=env).exit_code == 0
    noted = CliRunner().invoke(app, [*args, "--min-length", "3"], env=env)
    assert noted.exit_code == 1 and "has 2 entries, fewer than the 3 expected" in noted.stdout


async def test_delete_a_runs_newer_anchor_from_the_middle_of_the_log(recorded: Recorded) -> None:
    r, other = recorded.run_id, "run-other"
    at = Anchor(run_id=other, sequence=1, head=sha256_digest(b"other"), at=T0)
    await recorded.anchors.append(at)
    newer = await recorded.ledger.anchor(r)
    await recorded.anchors.append(at)
    assert newer is not None and newer.index == 3
    (_anchors_dir(recorded) / "log" / "000000000003.json").unlink()
    for copy in (_anchors_dir(recorded) / _run_dir(r)).glob("*-000000000003.json"):
        copy.unlink()
    summary = await broken(recorded)
    assert summary == (
        f"broken: anchor log entry 3 is missing from {recorded.anchors.location} (deleted: it "
        f"may have held a newer anchor of run {r})"
    ), summary
