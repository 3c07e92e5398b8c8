"""IncidentWorkflow end to end on a real Temporal dev server with real workers."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from sqlalchemy import func, select, update
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from examples.support_desk.spec import run_scenario
from models import FixtureMissPolicy, SideEffectRecord, SideEffectStatus
from models.incident_flow import (
    Counterfactual,
    IncidentPhase,
    IncidentRequest,
    IncidentView,
    RootCauseConfirmation,
    SideEffectResolution,
)
from models.queues import CONTROL_QUEUE
from stores.sql.incidents import SqlIncidentStore
from stores.sql.support_desk_world import refunds
from tests.workflow_queries import query_status
from workflows.incident import IncidentWorkflow


async def open_incident(stack, run_id: str, **kw) -> WorkflowHandle:
    request = IncidentRequest(incident_id=f"INC-{uuid.uuid4().hex[:8]}", source_run_id=run_id, **kw)
    return await stack.client.start_workflow(
        IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
    )


async def wait_phase(
    handle: WorkflowHandle, phase: IncidentPhase, deadline_s: float = 180
) -> IncidentView:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        view = await query_status(handle, IncidentView)
        if view is not None and view.phase is phase:
            return view
        if view is not None and view.phase is IncidentPhase.FAILED:
            raise AssertionError(f"incident failed: {view.error}")
        await asyncio.sleep(0.1)
    raise AssertionError(f"incident did not reach {phase} in {deadline_s}s")


async def wrong_customer_run(stack) -> str:
    for seed in range(30):
        result = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=seed
        )
        if result.outcome["emailed"] == "bob@example.com":
            return result.run_id
    raise AssertionError("no run emailed the wrong customer")


async def test_wrong_customer_incident_end_to_end(replay_stack) -> None:
    stack = replay_stack
    run_id = await wrong_customer_run(stack)
    handle = await open_incident(
        stack,
        run_id,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        repeat=10,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert view.signature is not None
    assert view.signature.signature == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
    assert view.freeze is not None and view.freeze.artifact_count > 0
    exact, v18 = view.replays
    assert (exact.label, v18.label) == ("exact", "prompt=v18")
    assert exact.reproduced is not None
    assert exact.runs == 10 and exact.reproduced >= 5
    assert v18.reproduced == 0 and v18.critical
    assert [p.kind for p in view.pending] == ["confirm_root_cause"]

    for bad, needle in (
        (
            RootCauseConfirmation(
                root_cause=" ", fix_version="v18", verified_by="dana", replay_ids=(v18.replay_id,)
            ),
            "root_cause",
        ),
        (
            RootCauseConfirmation(
                root_cause="x",
                fix_version="v18",
                verified_by="dana",
                replay_ids=("replay-elsewhere",),
            ),
            "cite",
        ),
    ):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("confirm_root_cause", bad)
        assert needle in str(refused.value.cause)

    cause = "prompt v17 does not prefer customer_id; lookup by phone returned two customers; v18 does not reproduce"
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause=cause, fix_version="v18", verified_by="dana", replay_ids=(v18.replay_id,)
        ),
    )
    final: IncidentView = await handle.result()
    assert final.confirmation is not None
    assert final.phase is IncidentPhase.COMPLETED and final.confirmation.root_cause == cause
    assert final.regression_case_id and set(final.report_refs) >= {"json", "md", "html"}
    html = (await stack.stores.artifacts.get(final.report_refs["html"])).decode()
    assert cause in html and "first-divergence" in html
    report = json.loads(await stack.stores.artifacts.get(final.report_refs["json"]))
    # every replay of the incident ran its steps in the sandbox, and the report says so
    assert {r["isolation"] for r in report["report"]["replays"]} == {"bubblewrap"}
    incidents = SqlIncidentStore(stack.stores.db)
    case = await incidents.get_case(final.regression_case_id)
    assert case.source_run_id == run_id and case.assertions
    groups = {g["signature"]: g for g in await incidents.signature_groups()}
    assert final.incident_id in groups["DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"]["incident_ids"]

    from app.regression import GateRepeats, run_gate

    mine = lambda gate: next(c for c in gate["cases"] if c["case_id"] == case.case_id)  # noqa: E731
    # the known-bad v17 never passes: 2 replays cannot show a rate below the threshold (the
    # upper end of v18's 0/10 in this incident, 0.2775), whatever they show (issue 32)
    v17 = mine(await run_gate(stack.client, stack.stores, [("prompt", "v17")], repeat=2))
    assert v17["passed"] is False and v17["verdict"] in ("INCONCLUSIVE", "FAILED")
    assert v17["threshold"] == 0.2775 and v17["threshold_source"].startswith("counterfactual")
    assert v17["verdict"] == "FAILED" or v17["repeats_to_decide"] > 2
    # fresh seeds each gate run, recorded; the same seeds replay the same answers
    assert len(v17["seeds"]) == 2
    again = mine(
        await run_gate(
            stack.client,
            stack.stores,
            [("prompt", "v17")],
            repeat=GateRepeats(seeds=tuple(v17["seeds"])),
        )
    )
    assert (again["seeds"], again["reproduced"]) == (v17["seeds"], v17["reproduced"])
    # v18 passes once its replays are enough to show it: 0 of 10 meets 0.2775
    v18 = mine(await run_gate(stack.client, stack.stores, [("prompt", "v18")], repeat=10))
    assert (v18["verdict"], v18["passed"], v18["reproduced"]) == ("PASSED", True, 0)
    # without live reads v18's CRM lookup misses a fixture: its replays show nothing either
    # way, so the case is INCONCLUSIVE — not a pass, and not a regression (issue 16)
    strict_gate = await run_gate(
        stack.client, stack.stores, [("prompt", "v18")], repeat=2, miss=FixtureMissPolicy.FAIL
    )
    strict = mine(strict_gate)
    assert strict["verdict"] == "INCONCLUSIVE" and strict["passed"] is False
    assert not strict["failures"] and len(strict["inconclusive"]) == 2
    assert {i["inconclusive_reason"] for i in strict["inconclusive"]} == {"FIXTURE_MISS"}
    assert strict_gate["passed"] is False and strict_gate["inconclusive"] >= 1


async def _refund_count(stack, preq: str) -> int:
    async with stack.world.store.read() as conn:
        return (
            await conn.execute(
                select(func.count())
                .select_from(refunds)
                .where(refunds.c.provider_request_id == preq)
            )
        ).scalar_one()


async def test_refund_timeout_incident_reconciles_without_retrying(replay_stack) -> None:
    stack = replay_stack
    result = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "refund-timeout", seed=4
    )
    (effect,) = await stack.stores.evidence.records(SideEffectRecord, result.run_id)
    assert await _refund_count(stack, effect.provider_request_id) == 1
    refunds_before = await stack.world.call_count("payments", "refund")
    handle = await open_incident(stack, result.run_id, repeat=3)
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert view.signature is not None
    assert view.signature.signature == "SIDE_EFFECT_UNKNOWN_NO_RETRY"
    (reconciled,) = view.side_effects
    assert (
        reconciled.status == "RECONCILED"
        and reconciled.applied is True
        and not reconciled.needs_human
    )
    record = await stack.stores.evidence.record(SideEffectRecord, effect.side_effect_id)
    assert record.status is SideEffectStatus.RECONCILED and record.reconciled_applied is True
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="the payment provider dropped the response after committing the refund",
            fix_version="payments-client-2",
            verified_by="dana",
            replay_ids=(view.replays[0].replay_id,),
        ),
    )
    final: IncidentView = await handle.result()
    assert final.phase is IncidentPhase.COMPLETED
    assert await _refund_count(stack, effect.provider_request_id) == 1
    assert (
        await stack.world.call_count("payments", "refund") == refunds_before
    )  # no retry reached it
    assert (await stack.stores.ledger.verify(result.run_id)).intact
    # a replay is answered with what the agent saw then (UNKNOWN), not the later reconciliation
    from models import ReplayMode
    from models.replay_flow import ReplayPlan

    again = await stack.replay(
        ReplayPlan(
            replay_id=f"replay-{uuid.uuid4().hex[:8]}",
            source_run_id=result.run_id,
            mode=ReplayMode.RECORDED,
        )
    )
    assert again.reproduced and again.comparison.same_outcome


async def test_an_inconclusive_side_effect_waits_for_a_human(replay_stack) -> None:
    stack = replay_stack
    result = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "refund-timeout", seed=5
    )
    (effect,) = await stack.stores.evidence.records(SideEffectRecord, result.run_id)
    # the provider has the refund under another key: the reconciler cannot tell
    async with stack.world.store.transaction() as conn:
        await conn.execute(
            update(refunds)
            .where(refunds.c.provider_request_id == effect.provider_request_id)
            .values(idempotency_key="someone-else")
        )
    handle = await open_incident(stack, result.run_id, repeat=2)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view = await query_status(handle, IncidentView)
        if view and view.pending:
            break
        await asyncio.sleep(0.1)
    assert view is not None
    assert view.phase is IncidentPhase.RECONCILING
    assert [p.side_effect_id for p in view.pending] == [effect.side_effect_id]
    with pytest.raises(WorkflowUpdateFailedError):
        await handle.execute_update(
            "resolve_side_effect",
            SideEffectResolution(
                side_effect_id="se-unknown", outcome="applied", evidence="x", resolved_by="dana"
            ),
        )
    await handle.execute_update(
        "resolve_side_effect",
        SideEffectResolution(
            side_effect_id=effect.side_effect_id,
            outcome="applied",
            evidence="provider dashboard shows refund rf-… paid on 2026-08-20",
            resolved_by="dana",
        ),
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert view.side_effects[0].applied is True
    record = await stack.stores.evidence.record(SideEffectRecord, effect.side_effect_id)
    assert record.status is SideEffectStatus.RECONCILED and "dana" in record.provider_receipt
    await handle.terminate("test done")
