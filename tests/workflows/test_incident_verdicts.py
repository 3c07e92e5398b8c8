"""An incident's verdicts are honest (issue 16), on a real Temporal dev server with real
workers: inconclusive runs are counted apart in its status, memo and report, a counterfactual
without a conclusive run cannot be cited for a root cause, and every replay of the incident —
its fork replays included — draws from the incident's one budget; the report shows an EXACT
replay's prompt drift."""

from __future__ import annotations

import dataclasses
import json

import pytest
from temporalio.client import WorkflowUpdateFailedError

import examples.support_desk.agent as support_agent
from models import FixtureMissPolicy, ReplayBudget
from models.incident_flow import Counterfactual, IncidentPhase, IncidentView, RootCauseConfirmation
from models.replay_flow import ReplayOutcome
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run

#: the incident's one budget of model calls: the exact replay (two runs of two calls: planner,
#: writer) takes four; the six left are shared by the two fork replays, which run first
#: (divergence first), and the whole-run v18 replay still to come: two calls each, and v18's
#: two runs take one each before their fixture miss (without the one budget the forks alone
#: would call the model 8 times)
CALLS = 10


async def test_inconclusive_counterfactuals_are_not_established_and_forks_share_the_budget(
    replay_stack,
) -> None:
    stack = replay_stack
    run_id = await wrong_customer_run(stack)
    handle = await open_incident(
        stack,
        run_id,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        repeat=2,
        miss_policy=FixtureMissPolicy.FAIL,  # v18 looks the customer up as never recorded
        fork_points=2,
        budget=ReplayBudget(max_model_calls=CALLS),
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION, deadline_s=300)
    # divergence first: the fork replays ran before the whole-run counterfactual
    exact, v18 = view.replays[0], view.replays[-1]
    assert v18.label == "prompt=v18" and v18.runs == 2 and v18.inconclusive == 2
    assert v18.inconclusive_reasons == {"FIXTURE_MISS": 2} and v18.rate is None
    assert v18.confidence.value == "LIMITED" and not v18.established
    forks = [r for r in view.replays if r.label.startswith("fork@")]
    assert forks, view.replays

    # the inconclusive count where Temporal shows the incident
    memo = await (await handle.describe()).memo()
    assert memo["inconclusive"] == sum(r.inconclusive for r in view.replays) >= 2
    assert memo["replays"] == len(view.replays)

    # one budget for every replay, the fork replays included
    used = 0
    for replay in view.replays:
        handle_of = stack.client.get_workflow_handle(replay.replay_id, result_type=ReplayOutcome)
        outcome = await handle_of.result()
        used += outcome.budget_used.model_calls
    assert used <= CALLS

    # a counterfactual with no conclusive run supports no root cause
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            "confirm_root_cause",
            RootCauseConfirmation(
                root_cause="v18 fixes it",
                fix_version="v18",
                verified_by="dana",
                replay_ids=(v18.replay_id,),
            ),
        )
    assert "no conclusive run" in str(refused.value.cause)
    assert exact.conclusive_runs >= 1
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="prompt v17 looks customers up by phone",
            fix_version="v18",
            verified_by="dana",
            replay_ids=(exact.replay_id,),
        ),
    )
    final: IncidentView = await handle.result()
    md = (await stack.stores.artifacts.get(final.report_refs["md"])).decode()
    html = (await stack.stores.artifacts.get(final.report_refs["html"])).decode()
    assert "not established: all 2 runs inconclusive (FIXTURE_MISS 2)" in md
    assert "not established: all 2 runs inconclusive (FIXTURE_MISS 2)" in html
    report = json.loads(await stack.stores.artifacts.get(final.report_refs["json"]))
    shown = next(r for r in report["report"]["replays"] if r["replay_id"] == v18.replay_id)
    assert shown["inconclusive"] == 2 and shown["confidence"] == "LIMITED"


async def test_the_report_shows_the_exact_replays_prompt_drift(
    replay_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = replay_stack
    then = dataclasses.replace(
        support_agent.INJECTIONS,
        tenant_config={**support_agent.INJECTIONS.tenant_config, "language": "fr"},
    )
    with monkeypatch.context() as patched:  # recorded with another tenant configuration
        patched.setattr(support_agent, "INJECTIONS", then)
        run_id = await wrong_customer_run(stack)
    handle = await open_incident(stack, run_id, repeat=1)
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    (exact,) = view.replays
    assert exact.confidence.value == "LIMITED"  # today's code compiles another prompt
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="prompt v17 looks customers up by phone",
            fix_version="v18",
            verified_by="dana",
            replay_ids=(exact.replay_id,),
        ),
    )
    final: IncidentView = await handle.result()
    report = json.loads(await stack.stores.artifacts.get(final.report_refs["json"]))
    (drift,) = report["prompt_drifts"]
    assert drift["type"] == "PROMPT_DRIFT" and drift["source_step"] == "planner"
    hashes = (drift["source_prompt_hash"], drift["replay_prompt_hash"])
    assert '+{"currency":"EUR","language":"en","tenant":"acme"}' in drift["prompt_diff"]
    md = (await stack.stores.artifacts.get(final.report_refs["md"])).decode()
    html = (await stack.stores.artifacts.get(final.report_refs["html"])).decode()
    for page in (md, html):
        assert "Prompt drift (PROMPT_DRIFT)" in page and all(h in page for h in hashes)
    assert '\n-{"currency":"EUR","language":"fr","tenant":"acme"}\n' in md
    assert "-{&quot;currency&quot;:&quot;EUR&quot;,&quot;language&quot;:&quot;fr&quot;" in html
