"""The recurrence watch (WATCHING) after an incident's report, on a real Temporal dev server:
clean runs with the fix complete it; a recurrence on the fix version reopens a linked incident."""

from __future__ import annotations

import asyncio
import time

from examples.support_desk.spec import run_scenario
from models.incident_flow import IncidentPhase, IncidentView, RootCauseConfirmation
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run

#: seconds the watch may take to see the runs and complete (a watch that never advances fails
#: the test instead of waiting for ever)
WATCH_TIMEOUT = 180


async def confirm(handle, view: IncidentView, fix_version: str) -> None:
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="prompt v17 does not say to identify customers by customer_id",
            fix_version=fix_version,
            verified_by="dana",
            replay_ids=(view.replays[0].replay_id,),
        ),
    )


async def wrong_customer_with(stack, prompt: str, want: str) -> str:
    for seed in range(40):
        result = await run_scenario(
            stack.world,
            stack.stores.ledger,
            stack.stores.artifacts,
            "wrong-customer",
            prompt_version=prompt,
            seed=seed,
        )
        if result.outcome["emailed"] == want:
            return result.run_id
    raise AssertionError(f"no {prompt} run emailed {want}")


async def test_clean_runs_with_the_fix_complete_the_watch(replay_stack) -> None:
    stack = replay_stack
    handle = await open_incident(
        stack,
        await wrong_customer_run(stack),
        repeat=1,
        watch_clean_runs=2,
        watch_interval_seconds=0.5,
    )
    await confirm(handle, await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION), "v18")
    view = await wait_phase(handle, IncidentPhase.WATCHING)
    assert view.report_refs and view.regression_case_id
    for _ in range(2):
        await wrong_customer_with(stack, "v18", "carol@example.com")
        await handle.signal("run_recorded", "any")
    final: IncidentView = await asyncio.wait_for(handle.result(), WATCH_TIMEOUT)
    assert final.phase is IncidentPhase.COMPLETED
    assert final.watch is not None and final.watch.runs_with_fix >= 2
    assert final.watch.recurrences == 0 and final.watch.reopened_incident_id is None


async def test_a_recurrence_on_the_fix_version_reopens_a_linked_incident(replay_stack) -> None:
    stack = replay_stack
    handle = await open_incident(
        stack,
        await wrong_customer_run(stack),
        repeat=1,
        watch_clean_runs=5,
        watch_interval_seconds=0.5,
    )
    # a mistaken fix: the human names v17, the version that fails
    await confirm(handle, await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION), "v17")
    await wait_phase(handle, IncidentPhase.WATCHING)
    recurring = await wrong_customer_with(stack, "v17", "bob@example.com")
    final: IncidentView = await asyncio.wait_for(handle.result(), WATCH_TIMEOUT)
    assert final.phase is IncidentPhase.COMPLETED
    assert final.watch is not None and final.watch.recurrences >= 1
    assert recurring in final.watch.recurred_run_ids
    reopened = stack.client.get_workflow_handle(final.watch.reopened_incident_id)
    assert (await reopened.describe()).workflow_type == "Incident"
    deadline = time.monotonic() + 60
    status = None
    while status is None and time.monotonic() < deadline:
        status = await reopened.query("status", result_type=IncidentView)
        await asyncio.sleep(0.1)
    assert status is not None and status.linked_incident_id == final.incident_id
    assert status.source_run_id == final.watch.recurred_run_ids[0]
    await reopened.terminate("test done")
