"""A capsule of an ingested run's case carries what its replays load from the run's
RUN_STARTED input — the system prompt and the tool catalogue (``input.*_ref``). Without the
catalogue every ``case run`` replay of it stopped at its first step (``artifact … not found``
in the throw-away store), found by trying docs/capsules.md on an ingested run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.capsule_run import capsule_store_settings
from app.capsules import export_case, import_capsule, open_capsule
from ingest.core import ingest_events, ingest_run
from models import ExecutionEventType
from models.ingest import IngestEventBatch
from models.regression import ExpectedOutcome, RegressionCase
from stores.bundle import open_stores
from stores.case_signing import CaseSigningKey
from tests.runtime.test_ingest import header, run_plain_agent

KEY = CaseSigningKey(Ed25519PrivateKey.generate(), "test")


async def test_a_capsule_carries_the_run_inputs_artifacts(tmp_path: Path) -> None:
    run_id = "ingested-capsule"
    async with open_stores(capsule_store_settings(tmp_path / "origin")) as stores:
        await ingest_run(stores.ledger, stores.artifacts, header(run_id))
        events = run_plain_agent(["a table for two", "yes", "bye"]).events
        batch = IngestEventBatch.model_validate({"events": events})
        await ingest_events(stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events)
        ((_, started),) = await stores.ledger.events_with_payloads(
            run_id, types=frozenset({ExecutionEventType.RUN_STARTED})
        )
        assert started is not None
        inputs = json.loads(started)["input"]
        refs = {inputs["tools_ref"], inputs["system_prompt_ref"]}
        case = RegressionCase(
            case_id="case-ingested",
            incident_id="INC-ingested",
            source_run_id=run_id,
            created_at=datetime.now(UTC),
            assertions=(ExpectedOutcome(contains="user"),),
        )
        await stores.incidents.put_case(case)
        data, _ = await export_case(stores, case.case_id, KEY)
    capsule = open_capsule(data, KEY.public)
    assert refs <= set(capsule.artifacts())
    async with open_stores(capsule_store_settings(tmp_path / "copy")) as copy:
        await import_capsule(copy, capsule)
        tools = json.loads(await copy.artifacts.get(inputs["tools_ref"]))
    assert "find_restaurant" in json.dumps(tools)


async def test_the_run_inputs_artifacts_are_among_the_runs_references(tmp_path: Path) -> None:
    """The incident freeze and legal holds read ``collect_references`` too: an ingested run's
    tool catalogue and system prompt are frozen and held with the rest of its evidence."""
    from runtime.evidence_refs import collect_references

    run_id = "ingested-refs"
    async with open_stores(capsule_store_settings(tmp_path / "origin")) as stores:
        await ingest_run(stores.ledger, stores.artifacts, header(run_id))
        events = run_plain_agent(["a table for two", "bye"]).events
        batch = IngestEventBatch.model_validate({"events": events})
        await ingest_events(stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events)
        ((_, started),) = await stores.ledger.events_with_payloads(
            run_id, types=frozenset({ExecutionEventType.RUN_STARTED})
        )
        assert started is not None
        inputs = json.loads(started)["input"]
        found = await collect_references(stores.ledger, stores.evidence, run_id)
    assert {inputs["tools_ref"], inputs["system_prompt_ref"]} <= found
