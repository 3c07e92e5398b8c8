"""The portable incident capsule (issue 32 item 5): a case made on the real stack is exported,
refused with one byte changed (naming the check), imported into another store where its run
verifies, and replayed offline — by the pytest plugin in a process whose Temporal, database
and artifact store point at nothing — with the verdict ``regress`` gives on the same case."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.capsule_run import capsule_store_settings, run_capsule
from app.capsules import export_case, import_capsule, list_cases, open_capsule
from app.regression import GateRepeats, run_gate
from forensics.failure_facts import gather_failure_facts
from forensics.regression_cases import regression_case_for
from models.errors import CapsuleRefusedError
from runtime.trajectory import load_trajectory
from stores.bundle import open_stores
from stores.case_signing import CaseSigningKey, public_pem
from stores.sql.incidents import SqlIncidentStore
from tests.workflows.test_incident_workflow import wrong_customer_run
from worker.catalogs import catalogs

#: a process that could reach no service even if it tried
NOWHERE = {
    "TEMPORAL_ADDRESS": "127.0.0.1:9",
    "REPLAYBOOK_DATABASE_URL": "postgresql://nobody@127.0.0.1:9/none",
    "REPLAYBOOK_ARTIFACTS": "s3://nowhere/capsule",
    "REPLAYBOOK_S3_ENDPOINT_URL": "http://127.0.0.1:9",
}


async def _case_of(stack, run_id: str) -> str:
    """The regression case the incident workflow would write for ``run_id``."""
    s = stack.stores
    case = regression_case_for(
        case_id=f"case-capsule-{uuid.uuid4().hex[:8]}",
        incident_id=f"INC-capsule-{uuid.uuid4().hex[:8]}",
        source_run_id=run_id,
        facts=await gather_failure_facts(s.ledger, s.evidence, run_id),
        source=await load_trajectory(s.ledger, run_id),
        description="wrong customer emailed",
        now=datetime.now(UTC),
    )
    assert case is not None
    await SqlIncidentStore(s.db).put_case(case)
    return case.case_id


def _one_byte_changed(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0x01
    return bytes(changed)


async def test_capsule_round_trip(replay_stack, tmp_path: Path) -> None:
    stack = replay_stack
    case_id = await _case_of(stack, await wrong_customer_run(stack))
    gate = await run_gate(stack.client, stack.stores, [("prompt", "v17")], repeat=5)
    regress = next(c for c in gate["cases"] if c["case_id"] == case_id)
    assert regress["verdict"] != "PASSED"  # the known-bad prompt

    key = CaseSigningKey(Ed25519PrivateKey.generate(), "test")
    data, manifest = await export_case(stack.stores, case_id, key)
    assert manifest.chain_heads[0].run_id == manifest.source_run_id
    assert case_id in {c["case_id"] for c in await list_cases(stack.stores)}

    # one byte changed anywhere — an entry's bytes, the signature line — is refused by name
    for at, check in ((len(data) // 2, "signature"), (len(data) - 3, "signature")):
        with pytest.raises(CapsuleRefusedError) as refused:
            open_capsule(_one_byte_changed(data, at), key.public)
        assert refused.value.check == check and "sign" in str(refused.value)
    with pytest.raises(CapsuleRefusedError) as other_key:
        open_capsule(data, Ed25519PrivateKey.generate().public_key())
    assert "not with the given key" in str(other_key.value)

    capsule = open_capsule(data, key.public)
    async with open_stores(capsule_store_settings(tmp_path / "imported")) as elsewhere:
        run_id = await import_capsule(elsewhere, capsule)
        assert (await elsewhere.ledger.verify(run_id)).intact
        assert (await SqlIncidentStore(elsewhere.db).get_case(case_id)) == capsule.case

    # the gate's own seeds, offline: the same replays, so the same verdict and counts
    same = GateRepeats(seeds=tuple(regress["seeds"]))
    offline = await run_capsule(capsule, [("prompt", "v17")], catalogs(None), repeat=same)
    assert offline["verdict"] == regress["verdict"]
    assert (offline["reproduced"], offline["conclusive"], offline["threshold"]) == (
        regress["reproduced"],
        regress["conclusive"],
        regress["threshold"],
    )
    assert {f["assertion"] for f in offline["failures"]} == {
        f["assertion"] for f in regress["failures"]
    }

    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "good.rbcase").write_bytes(data)
    (cases / "tampered.rbcase").write_bytes(_one_byte_changed(data, len(data) // 3))
    (tmp_path / "pub.pem").write_bytes(public_pem(key.public))
    # in a thread: the session's workers run on this loop meanwhile
    plugin = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--replaybook-capsules",
            str(cases),
            "--replaybook-candidate",
            "prompt=v17",
            "--replaybook-repeat",
            "5",
            "--replaybook-public-key",
            str(tmp_path / "pub.pem"),
        ],
        cwd=tmp_path,
        env={**os.environ, **NOWHERE, "REPLAYBOOK_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = plugin.stdout
    assert plugin.returncode == 1, out + plugin.stderr
    assert "2 failed" in out, out
    assert regress["failures"][0]["assertion"] in out, out
    assert "tampered.rbcase refused: check 'signature' failed" in out, out
