"""Retention classes and the sweep: durations per class, and the sweep on S3 (SeaweedFS),
where the encrypted raw objects themselves are deleted (every version) unless held."""

from __future__ import annotations

from datetime import timedelta

import pytest

from examples.support_desk.spec import run_scenario
from models.enums import RetentionClass
from models.privacy import RawEvidenceState
from models.retention import RETENTION_PERIODS, retention_until
from stores.sql import privacy as sql_privacy
from tests.runtime.privacy.conftest import PrivacyStack, make_stack


async def test_every_retention_class_has_a_duration() -> None:
    assert set(RETENTION_PERIODS) == set(RetentionClass)
    classes = ("EPHEMERAL", "STANDARD", "INCIDENT", "REGULATORY")
    ordered = [RETENTION_PERIODS[RetentionClass(c)] for c in classes]
    assert ordered == sorted(ordered) and ordered[0] > timedelta(0)
    assert RETENTION_PERIODS[RetentionClass.STANDARD] == timedelta(days=90)


async def _run_with_raw_objects(stack: PrivacyStack) -> tuple[str, list[str]]:
    result = await run_scenario(stack.world, stack.ledger, stack.artifacts, "wrong-customer")
    refs = await stack.vault.raw_refs(result.run_id)
    assert refs, "raw ciphertexts are stored as objects"
    return result.run_id, refs


async def test_sweep_on_s3_deletes_expired_raw_objects_and_keeps_held_ones(
    private_database, s3_artifact_store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every ciphertext goes to the object store (normally only those above 64 KiB)
    monkeypatch.setattr(sql_privacy, "INLINE_CIPHERTEXT_LIMIT", 0)
    stack = await make_stack(private_database, s3_artifact_store)
    expired, expired_refs = await _run_with_raw_objects(stack)
    held, held_refs = await _run_with_raw_objects(stack)
    hold, _ = await stack.privacy.hold(held, "regulator request R-3")
    assert all([await s3_artifact_store.legal_hold(d) for d in held_refs])

    run = await stack.ledger.get_run(expired)
    assert run.retention_class is RetentionClass.STANDARD
    later = retention_until(stack.vault.clock(), RetentionClass.STANDARD) + timedelta(days=1)
    result = await stack.privacy.sweep(now=later)
    destroyed = {d["run_id"]: d for d in result["destroyed"]}
    assert destroyed[expired]["raw_payloads"] == len(expired_refs)
    assert held not in destroyed
    assert any(h["run_id"] == held and hold.hold_id in h["held"][0] for h in result["held"])
    assert not any([await s3_artifact_store.exists(d) for d in expired_refs])
    assert all([await s3_artifact_store.exists(d) for d in held_refs])
    seq = next(e.sequence for e in await stack.ledger.events(expired) if e.type == "TOOL_CALL")
    assert (await stack.vault.raw_evidence(expired, seq, decrypt=False)).state is (
        RawEvidenceState.DESTROYED
    )
    assert (await stack.ledger.verify(expired)).intact
    # before its retention ends a run is kept, whatever else the sweep did
    assert expired not in {d["run_id"] for d in (await stack.privacy.sweep())["destroyed"]}

    await stack.privacy.release(held)
    assert not any([await s3_artifact_store.legal_hold(d) for d in held_refs])
    again = await stack.privacy.sweep(now=later)
    assert held in {d["run_id"] for d in again["destroyed"]}
    assert not any([await s3_artifact_store.exists(d) for d in held_refs])
