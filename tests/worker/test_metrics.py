"""Prometheus metrics counted by the activities, on a real Temporal dev server with real
workers in this process (the default registry is this process's)."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client import REGISTRY

from activities import metrics
from examples.support_desk.spec import run_scenario
from models import ReplayBudget, ReplayMode, ReplayStatus
from models.incident_flow import IncidentPhase, RootCauseConfirmation
from models.replay_flow import ReplayPlan
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def plan(run_id: str, mode: ReplayMode = ReplayMode.RECORDED, **kw) -> ReplayPlan:
    return ReplayPlan(
        replay_id=f"replay-{uuid.uuid4().hex[:12]}", source_run_id=run_id, mode=mode, **kw
    )


async def test_replay_results_budget_writes_and_misses_are_counted(replay_stack) -> None:
    stack = replay_stack
    happy = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=11
    )
    before = {
        "reproduced": value("agent_replay_total", mode="RECORDED", result="reproduced"),
        "blocked": sum(
            value("agent_replay_write_blocked_total", capability=c)
            for c in ("email.send", "payment.refund")
        ),
        "duration": value("agent_replay_duration_seconds_count", mode="RECORDED"),
    }
    outcome = await stack.replay(plan(happy.run_id))
    assert outcome.status is ReplayStatus.COMPLETED and outcome.reproduced
    assert value("agent_replay_total", mode="RECORDED", result="reproduced") == (
        before["reproduced"] + 1
    )
    blocked = sum(
        value("agent_replay_write_blocked_total", capability=c)
        for c in ("email.send", "payment.refund")
    )
    assert blocked == before["blocked"] + outcome.writes_blocked and outcome.writes_blocked > 0
    assert value("agent_replay_duration_seconds_count", mode="RECORDED") == before["duration"] + 1
    assert value("agent_replay_write_executed_total", capability="email.send") == 0

    wrong = await wrong_customer_run(stack)
    misses = value("agent_replay_fixture_miss_total", capability="crm.get_customer")
    stopped = value("agent_replay_total", mode="PROMPT_SWAP", result="stopped")
    diffs = sum(
        value("agent_replay_behavior_diff_total", type=t)
        for t in (
            "OUTCOME_CHANGED",
            "TOOL_CHANGED",
            "SIDE_EFFECT_REMOVED",
            "MODEL_DECISION_CHANGED",
        )
    )
    failed = await stack.replay(plan(wrong, ReplayMode.PROMPT_SWAP, prompt_version="v18"))
    assert failed.partial and failed.fixture_misses == 1
    assert value("agent_replay_fixture_miss_total", capability="crm.get_customer") == misses + 1
    assert value("agent_replay_total", mode="PROMPT_SWAP", result="stopped") == stopped + 1
    assert (
        sum(
            value("agent_replay_behavior_diff_total", type=t)
            for t in (
                "OUTCOME_CHANGED",
                "TOOL_CHANGED",
                "SIDE_EFFECT_REMOVED",
                "MODEL_DECISION_CHANGED",
            )
        )
        > diffs
    )

    exhausted = value("agent_replay_budget_exhausted_total", mode="EXACT")
    ratios = value("agent_replay_budget_used_ratio_count", resource="model_calls")
    calls = value("agent_replay_budget_used_total", mode="EXACT", resource="model_calls")
    partial = await stack.replay(
        plan(wrong, ReplayMode.EXACT, budget=ReplayBudget(max_model_calls=1))
    )
    assert partial.partial and partial.budget_used.model_calls == 1
    assert value("agent_replay_budget_exhausted_total", mode="EXACT") == exhausted + 1
    assert value("agent_replay_budget_used_ratio_count", resource="model_calls") == ratios + 1
    assert value("agent_replay_budget_used_total", mode="EXACT", resource="model_calls") == (
        calls + 1
    )

    failed_before = value("agent_replay_total", mode="RECORDED", result="failed")
    missing = await stack.replay(
        plan(happy.run_id, ReplayMode.RECORDED, policy_version="no-such-policy")
    )
    assert missing.status is ReplayStatus.FAILED
    assert value("agent_replay_total", mode="RECORDED", result="failed") == failed_before + 1


async def test_incident_counts_unknown_reconciliation_and_regression_case(replay_stack) -> None:
    stack = replay_stack
    unknown = value("agent_unknown_side_effect_total", capability="payment.refund")
    result = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "refund-timeout", seed=6
    )
    # counted when the agent recorded it (this process), not again by the incident
    assert value("agent_unknown_side_effect_total", capability="payment.refund") == unknown + 1
    applied = value("agent_reconciliation_total", result="applied")
    cases = value("agent_incident_regression_case_total")
    completed = sum(
        value("agent_incident_total", phase="COMPLETED", failure_type=t)
        for t in ("SIDE_EFFECT", "UNSIGNED")
    )
    handle = await open_incident(stack, result.run_id, repeat=2)
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert value("agent_unknown_side_effect_total", capability="payment.refund") == unknown + 1
    assert value("agent_reconciliation_total", result="applied") == applied + 1
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="the provider committed the refund and the response was lost",
            fix_version="payments-client-2",
            verified_by="dana",
            replay_ids=(view.replays[0].replay_id,),
        ),
    )
    final = await handle.result()
    assert final.regression_case_id
    assert value("agent_incident_regression_case_total") == cases + 1
    assert (
        sum(
            value("agent_incident_total", phase="COMPLETED", failure_type=t)
            for t in ("SIDE_EFFECT", "UNSIGNED")
        )
        == completed + 1
    )


def test_each_thing_is_counted_once_per_process() -> None:
    key = f"test:{uuid.uuid4().hex}"
    assert metrics.once(key) is True
    assert metrics.once(key) is False


@pytest.mark.parametrize("text", ["x", "70000", "-1"])
def test_a_bad_metrics_port_is_a_clear_error(text: str) -> None:
    from models.errors import ConfigurationError
    from worker.settings import Settings

    with pytest.raises(ConfigurationError, match="REPLAYBOOK_METRICS_PORT"):
        Settings.from_env({"REPLAYBOOK_METRICS_PORT": text})


def test_the_seed_metric_names_are_registered() -> None:
    names = {m.name for m in REGISTRY.collect()}
    for name in (
        "agent_replay",
        "agent_replay_fixture_miss",
        "agent_replay_behavior_diff",
        "agent_unknown_side_effect",
        "agent_reconciliation",
        "agent_incident_regression_case",
        "agent_replay_duration_seconds",
    ):
        assert name in names
