"""The tau2-bench results importer, on a results file written here from tau2-bench's published
data model (``Results``/``SimulationRun``: messages with ``tool_calls`` as ``{id, name,
arguments, requestor}``, tool messages answering by ``id`` with ``error``, ``reward_info``,
``termination_reason``, tasks with ``evaluation_criteria.actions``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.local_replay import engine_for, replay_locally
from integrations.tau2_bench.importer import import_tau2_bench
from integrations.tau_bench.imported import load_imported_runs
from models import ReplayMode, SideEffectRecord
from tests.fixtures_import import TAU

USER = "mia_li_3668"


def _call(n: int, name: str, arguments: dict[str, Any], requestor: str = "assistant") -> dict:
    return {"id": f"c{n}", "name": name, "arguments": arguments, "requestor": requestor}


def _results() -> dict[str, Any]:
    messages = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0},
        {"role": "user", "content": f"Cancel reservation NO6JO3 please, I am {USER}."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(1, "get_user_details", {"user_id": USER})],
        },
        {
            "role": "tool",
            "id": "c1",
            "content": '{"user_id": "mia_li_3668"}',
            "requestor": "assistant",
            "error": False,
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(2, "cancel_reservation", {"reservation_id": "XXXXXX"})],
        },
        {
            "role": "tool",
            "id": "c2",
            "content": "Reservation XXXXXX not found",
            "requestor": "assistant",
            "error": True,
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call(3, "cancel_reservation", {"reservation_id": "NO6JO3"})],
        },
        {
            "role": "tool",
            "id": "c3",
            "content": '{"status": "cancelled"}',
            "requestor": "assistant",
            "error": False,
        },
        # a user-side tool (tau2's telecom style): not the agent's call
        {
            "role": "user",
            "content": None,
            "tool_calls": [_call(4, "toggle_airplane_mode", {}, "user")],
        },
        {"role": "tool", "id": "c4", "content": "ok", "requestor": "user", "error": False},
        {"role": "assistant", "content": "Your reservation NO6JO3 is cancelled."},
        {"role": "user", "content": "Thanks! ###STOP###"},
    ]
    return {
        "timestamp": "2025-06-01T00:00:00",
        "info": {
            "num_trials": 1,
            "max_steps": 100,
            "max_errors": 10,
            "environment_info": {"domain_name": "airline", "policy": "# Airline Agent Policy"},
        },
        "tasks": [
            {
                "id": "7",
                "evaluation_criteria": {
                    "actions": [
                        {
                            "action_id": "7_0",
                            "requestor": "assistant",
                            "name": "cancel_reservation",
                            "arguments": {"reservation_id": "NO6JO3"},
                        }
                    ],
                    "communicate_info": [],
                },
            }
        ],
        "simulations": [
            {
                "id": "sim-1",
                "task_id": "7",
                "trial": 0,
                "start_time": "2025-06-01T00:00:00",
                "end_time": "2025-06-01T00:01:00",
                "duration": 60.0,
                "termination_reason": "user_stop",
                "reward_info": {"reward": 1.0, "db_check": {"db_match": True, "db_reward": 1.0}},
                "messages": messages,
            }
        ],
    }


async def test_a_tau2_results_file_imports_replays_and_feeds_forensics(
    stores, tmp_path: Path
) -> None:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_results()), encoding="utf-8")
    report = await import_tau2_bench(
        stores.ledger, stores.artifacts, stores.evidence, path, TAU / "tools_info.json"
    )
    (run_id,) = report.run_ids
    assert report.opaque == [f"{path}: 2 user-side tool messages left out"]
    run = await stores.ledger.get_run(run_id)
    assert run.labels["format"] == "tau2-bench" and run.labels["termination_reason"] == "user_stop"
    assert (await stores.ledger.verify(run_id)).intact
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    # the failed tool answer (error: true) is a failed write; the second one applied
    assert [(e.capability_id, e.status.value) for e in effects] == [
        ("cancel_reservation", "FAILED"),
        ("cancel_reservation", "CONFIRMED"),
    ]
    (forensics,) = await load_imported_runs(stores, run_id)
    assert forensics.recorded_reward == 1.0
    assert [a.name for a in forensics.expected_actions] == ["cancel_reservation"]
    assert forensics.calls[1].output == "Error: Reservation XXXXXX not found"

    local = await replay_locally(engine_for(stores), run_id, ReplayMode.RECORDED)
    c = local.comparison
    assert c is not None and local.stopped is None and local.model_calls == 0
    assert c.same_outcome and c.same_tool_sequence and c.diffs == ()

    again = await import_tau2_bench(
        stores.ledger, stores.artifacts, stores.evidence, path, TAU / "tools_info.json"
    )
    assert again.run_ids == [run_id] and again.imported == 0
