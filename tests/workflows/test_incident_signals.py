"""The incident's human inputs as signals (same payloads as the updates), refused signals kept
in the view, and a regression case built from the confirming person's expectations — on a real
Temporal dev server, signalled with the real ``temporal`` CLI."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import update

from app.incidents import incident_status_view
from examples.support_desk.spec import run_scenario
from models import SideEffectRecord
from models.incident_flow import IncidentPhase, IncidentView
from models.regression import HumanExpectation, evaluate_case
from runtime.trajectory import load_trajectory
from stores.sql.incidents import SqlIncidentStore
from stores.sql.support_desk_world import refunds
from tests.workflows.test_incident_workflow import open_incident, wait_phase

BIN = Path(sys.executable).parent


def temporal_signal(address: str, workflow_id: str, name: str, payload: object) -> None:
    command = [str(BIN / "temporal"), "workflow", "signal", "--workflow-id", workflow_id]
    command += ["--name", name, "--input", json.dumps(payload), "--address", address]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ})
    assert done.returncode == 0, done.stderr


async def wait_view(handle, check, deadline_s: float = 60) -> IncidentView:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        view = await handle.query("status", result_type=IncidentView)
        if view is not None and check(view):
            return view
        await asyncio.sleep(0.1)
    raise AssertionError("the incident never got there")


async def test_confirm_signal_with_expectations_makes_the_case(
    replay_stack, temporal_server
) -> None:
    stack, address = replay_stack, temporal_server.address
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=1
    )
    handle = await open_incident(stack, run.run_id, repeat=2)
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    # no structured fact explains a happy run: no built-in assertion, an expectation is needed
    assert view.signature is not None
    assert view.signature.builtin_assertions == 0
    replay_id = view.replays[0].replay_id
    base = {"root_cause": "x", "fix_version": "v18", "verified_by": "dana"}

    temporal_signal(address, handle.id, "confirm_root_cause", {**base, "replay_ids": []})
    temporal_signal(address, handle.id, "confirm_root_cause", {**base, "replay_ids": [replay_id]})
    temporal_signal(
        address,
        handle.id,
        "confirm_root_cause",
        {**base, "replay_ids": [replay_id], "expectations": ["tool x called after y"]},
    )
    view = await wait_view(handle, lambda v: len(v.rejected_signals) == 3)
    reasons = [r.reason for r in view.rejected_signals]
    assert "replay_ids" in reasons[0]
    assert "an expectation is needed" in reasons[1] and "--expect" in reasons[1]
    assert "expected the end" in reasons[2]
    assert view.phase is IncidentPhase.AWAITING_CONFIRMATION
    shown = await incident_status_view(stack.client, handle.id)
    assert [r["name"] for r in shown["rejected_signals"]] == ["confirm_root_cause"] * 3

    expectations = [
        "tool crm.find_by_phone called before payment.refund",
        "no side_effect payment.refund where amount != ticket.amount",
        "outcome.customer_id == ticket.customer_id",
    ]
    temporal_signal(
        address,
        handle.id,
        "confirm_root_cause",
        {
            **base,
            "replay_ids": [replay_id],
            "failure_type": "PROMPT",
            "expectations": expectations,
        },
    )
    final: IncidentView = await handle.result()
    assert final.phase is IncidentPhase.COMPLETED
    assert final.confirmation is not None and final.signature is not None
    assert final.confirmation.failure_type == "PROMPT"
    assert final.signature.failure_type == "MODEL_DECISION"  # the automatic one, kept
    incidents = SqlIncidentStore(stack.stores.db)
    assert final.regression_case_id is not None
    case = await incidents.get_case(final.regression_case_id)
    assert [a.text for a in case.assertions if isinstance(a, HumanExpectation)] == expectations
    assert evaluate_case(case, await load_trajectory(stack.stores.ledger, run.run_id)).passed
    stored = await incidents.get_incident(final.incident_id)
    assert stored.failure_type == "PROMPT"


async def test_resolve_signal_settles_a_side_effect(replay_stack, temporal_server) -> None:
    stack, address = replay_stack, temporal_server.address
    run = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "refund-timeout", seed=5
    )
    (effect,) = await stack.stores.evidence.records(SideEffectRecord, run.run_id)
    # the provider has the refund under another key: the reconciler cannot tell
    async with stack.world.store.transaction() as conn:
        await conn.execute(
            update(refunds)
            .where(refunds.c.provider_request_id == effect.provider_request_id)
            .values(idempotency_key=f"someone-else-{run.run_id}")
        )
    handle = await open_incident(stack, run.run_id, repeat=2)
    await wait_view(handle, lambda v: bool(v.pending))
    payload = {"outcome": "applied", "evidence": "dashboard", "resolved_by": "dana"}
    temporal_signal(
        address, handle.id, "resolve_side_effect", {**payload, "side_effect_id": "se-nope"}
    )
    view = await wait_view(handle, lambda v: bool(v.rejected_signals))
    assert "se-nope is not waiting" in view.rejected_signals[0].reason
    temporal_signal(
        address,
        handle.id,
        "resolve_side_effect",
        {**payload, "side_effect_id": effect.side_effect_id},
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert view.side_effects[0].applied is True and view.side_effects[0].status == "RECONCILED"
    await handle.terminate("test done")
