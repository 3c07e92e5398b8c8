"""``replaybook slo``: each objective fails on data that breaks it and passes once fixed, on
SQLite and on PostgreSQL (a fresh database each, so other tests' rows do not count)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import pytest_asyncio
from pydantic import JsonValue
from sqlalchemy import delete

from app.slo import compute_slos
from devstack.demo import record_sample_run
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from forensics.reconcile import reconcile_side_effect
from models import (
    ExecutionEventType,
    PinnedVersions,
    RunRecord,
    SideEffectRecord,
    SideEffectStatus,
)
from models.canonical import canonical_hash
from models.regression import ForbiddenSideEffect, RegressionCase
from models.slo import retried_while_unknown
from runtime.recorder import RunRecorder
from stores.artifacts.local import LocalArtifactStore
from stores.bundle import Stores
from stores.sql import schema
from stores.sql.database import open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.incidents import SqlIncidentStore
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.side_effect_leases import sweep_expired_side_effects
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_db import PG_ADMIN_URL
from worker.agents import reconcilers_for

E = ExecutionEventType
S = SideEffectStatus
T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)


@pytest_asyncio.fixture(params=["sqlite", "postgresql"])
async def fresh_stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'slo.db'}"
    else:
        url = await create_scratch_database(PG_ADMIN_URL, "rb_slo")
    db = await open_database(url)
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    try:
        yield Stores(db, artifacts, SqlLedger(db, artifacts), SqlEvidenceReader(db))
    finally:
        await db.dispose()
        if request.param == "postgresql":
            await drop_scratch_database(PG_ADMIN_URL, url)


def verdicts(slo) -> dict[str, bool]:
    return {r.name: r.passed for r in slo.objectives}


async def new_run(stores: Stores, run_id: str, **labels: str) -> None:
    await stores.ledger.create_run(
        RunRecord(
            run_id=run_id,
            graph_id="slo-test",
            graph_version="1",
            created_at=T0,
            pinned=PinnedVersions(model_profile="m@1", prompt_bundle_hash=canonical_hash("p")),
            labels=labels,
        )
    )


def effect(run_id: str, status: SideEffectStatus, **kw) -> SideEffectRecord:
    key = f"idem-{run_id}"
    return SideEffectRecord(
        side_effect_id=f"se-{run_id}",
        run_id=run_id,
        step_id="refund",
        capability_id="payment.refund",
        idempotency_key=key,
        action_hash=canonical_hash({"run": run_id}),
        status=status,
        **kw,
    )


async def test_every_objective_fails_on_bad_data_and_passes_when_fixed(fresh_stores) -> None:
    stores = fresh_stores
    empty = await compute_slos(stores)
    assert empty.passed and empty.objectives[0].value is None  # nothing measured: no fake 100%

    world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
    await world.ensure()
    happy = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
    refund = await run_scenario(world, stores.ledger, stores.artifacts, "refund-timeout", seed=1)
    slo = await compute_slos(stores)
    assert verdicts(slo) == {
        "critical_run_evidence_completeness": True,
        "unknown_auto_retries": True,
        "unreconciled_critical_side_effects": False,
        "replays_with_production_write": True,
        "confirmed_incident_regression_coverage": True,
    }
    unreconciled = slo.objectives[2]
    assert unreconciled.value == 1 and refund.run_id in unreconciled.offenders[0]
    completeness = slo.objectives[0]
    assert (completeness.numerator, completeness.denominator, completeness.value) == (2, 2, 100)

    # reconcile the refund (the provider says it was applied): now every objective passes
    (unknown,) = await stores.evidence.records(SideEffectRecord, refund.run_id)
    graph_id = (await stores.ledger.get_run(refund.run_id)).graph_id
    await reconcile_side_effect(
        stores.evidence,
        RunRecorder(stores.ledger, stores.artifacts, refund.run_id),
        reconcilers_for(graph_id, SqlWorldStore.beside(stores.db.engine.url)),
        unknown.side_effect_id,
    )
    assert (await compute_slos(stores)).passed

    # a critical run with incomplete evidence (the sample run's model call names no prompt)
    await record_sample_run(stores, "run-incomplete", T0)
    slo = await compute_slos(stores)
    assert verdicts(slo)["critical_run_evidence_completeness"] is False
    assert slo.objectives[0].value == pytest.approx(66.67)  # 2 of 3 critical runs
    assert slo.objectives[0].offenders[0].startswith("run-incomplete")
    await _forget_run(stores, "run-incomplete")
    assert (await compute_slos(stores)).passed

    # an UNKNOWN side effect executed again with no reconciliation in between
    await new_run(stores, "run-retried")
    for status in (S.PLANNED, S.EXECUTING, S.UNKNOWN, S.EXECUTING, S.CONFIRMED):
        await stores.ledger.append(
            "run-retried",
            NewEvent("refund", E.SIDE_EFFECT, T0, record=effect("run-retried", status)),
        )
    slo = await compute_slos(stores)
    assert verdicts(slo)["unknown_auto_retries"] is False
    assert slo.objectives[1].offenders == ("se-run-retried",)
    await _forget_run(stores, "run-retried")

    # a replay run that recorded a side effect: it executed a write
    await new_run(stores, "replay-wrote", kind="replay")
    await stores.ledger.append(
        "replay-wrote",
        NewEvent("refund", E.SIDE_EFFECT, T0, record=effect("replay-wrote", S.CONFIRMED)),
    )
    slo = await compute_slos(stores)
    assert verdicts(slo)["replays_with_production_write"] is False
    assert slo.objectives[3].offenders == ("replay-wrote",)
    assert (
        verdicts(slo)["critical_run_evidence_completeness"] is True
    )  # replays are not critical runs
    await _forget_run(stores, "replay-wrote")

    # a confirmed incident without a regression case, then with one
    incidents = SqlIncidentStore(stores.db)
    confirmed: dict[str, JsonValue] = {
        "confirmation": {"root_cause": "x", "fix_version": "v18", "verified_by": "dana"}
    }
    await incidents.save_incident("INC-1", happy.run_id, None, None, None, "COMPLETED", confirmed)
    await incidents.save_incident(
        "INC-2", happy.run_id, None, None, None, "AWAITING_CONFIRMATION", {}
    )
    slo = await compute_slos(stores)
    coverage = slo.objectives[4]
    assert not coverage.passed and coverage.offenders == ("INC-1",)
    assert (coverage.numerator, coverage.denominator) == (0, 1)
    await incidents.put_case(
        RegressionCase(
            case_id="case-INC-1",
            incident_id="INC-1",
            source_run_id=happy.run_id,
            created_at=T0,
            assertions=(ForbiddenSideEffect(capability_id="payment.refund"),),
        )
    )
    slo = await compute_slos(stores)
    assert slo.passed and slo.objectives[4].value == 100


async def test_executing_past_its_lease_is_unreconciled_until_reconciled(fresh_stores) -> None:
    now = [T0]
    ledger = SqlLedger(fresh_stores.db, fresh_stores.artifacts, clock=lambda: now[0])
    stores = replace(fresh_stores, ledger=ledger, side_effect_lease_seconds=60)
    await new_run(stores, "run-stuck")
    await ledger.append(
        "run-stuck", NewEvent("refund", E.SIDE_EFFECT, T0, record=effect("run-stuck", S.EXECUTING))
    )

    def unreconciled() -> tuple[str, ...]:
        return next(
            o.offenders for o in slo.objectives if o.name == "unreconciled_critical_side_effects"
        )

    slo = await compute_slos(stores)
    assert unreconciled() == ()  # within its lease: still in flight, not yet unknowable
    now[0] = T0 + timedelta(seconds=61)  # its process died: the lease passes
    slo = await compute_slos(stores)
    assert unreconciled() == ("se-run-stuck (run run-stuck)",)
    (swept,) = await sweep_expired_side_effects(ledger, 60)
    assert swept.status is S.UNKNOWN
    slo = await compute_slos(stores)
    assert unreconciled() == ("se-run-stuck (run run-stuck)",)  # UNKNOWN: still unreconciled
    await ledger.append(
        "run-stuck",
        NewEvent(
            "refund",
            E.SIDE_EFFECT,
            now[0],
            record=effect("run-stuck", S.RECONCILED, reconciled_applied=True),
        ),
    )
    slo = await compute_slos(stores)
    assert unreconciled() == ()


async def _forget_run(stores: Stores, run_id: str) -> None:
    """Remove a run the test planted (its rows only), so the next objective starts clean."""
    async with stores.db.transaction() as conn:
        for table in (
            schema.side_effects,
            schema.tool_fixtures,
            schema.prompt_artifacts,
            schema.context_snapshots,
            schema.policy_decisions,
            schema.approvals,
            schema.checkpoints,
            schema.retrieval_fixtures,
            schema.execution_events,
        ):
            await conn.execute(delete(table).where(table.c.run_id == run_id))
        await conn.execute(delete(schema.runs).where(schema.runs.c.run_id == run_id))


@pytest.mark.parametrize(
    ("history", "retried"),
    [
        ([S.PLANNED, S.EXECUTING, S.CONFIRMED], False),
        ([S.PLANNED, S.EXECUTING, S.UNKNOWN], False),
        ([S.PLANNED, S.EXECUTING, S.UNKNOWN, S.EXECUTING], True),
        ([S.EXECUTING, S.UNKNOWN, (S.RECONCILED, True), S.EXECUTING], True),
        ([S.EXECUTING, S.UNKNOWN, (S.RECONCILED, False), S.EXECUTING, S.CONFIRMED], False),
        ([S.EXECUTING, S.FAILED, S.EXECUTING, S.CONFIRMED], False),
    ],
)
def test_retried_while_unknown(history, retried: bool) -> None:
    steps = [h if isinstance(h, tuple) else (h, None) for h in history]
    assert retried_while_unknown(steps) is retried


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


async def test_cli_exit_codes(tmp_path: Path) -> None:
    """``replaybook slo`` exits 0 while every objective passes and 1 once one fails."""
    cli = str(Path(sys.executable).parent / "replaybook")
    env = {
        "REPLAYBOOK_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
        "REPLAYBOOK_LOG_FORMAT": "json",
    }
    done = await asyncio.to_thread(run, [cli, "slo"], env)
    assert done.returncode == 0, done.stderr
    assert "PASS  unknown_auto_retries" in done.stdout and "all SLOs pass" in done.stdout

    db = await open_database(f"sqlite+aiosqlite:///{tmp_path / 'replaybook.db'}")
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    try:
        world = SimulatedWorld(SqlWorldStore.beside(db.engine.url))
        await world.ensure()
        refund = await run_scenario(
            world, SqlLedger(db, artifacts), artifacts, "refund-timeout", seed=2
        )
    finally:
        await db.dispose()
    done = await asyncio.to_thread(run, [cli, "slo", "--json"], env)
    assert done.returncode == 1, done.stderr
    body = json.loads(done.stdout)
    assert body["passed"] is False
    (bad,) = [o for o in body["objectives"] if not o["passed"]]
    assert bad["name"] == "unreconciled_critical_side_effects" and bad["value"] == 1
    assert refund.run_id in bad["offenders"][0]
