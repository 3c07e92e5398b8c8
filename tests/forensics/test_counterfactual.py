"""The benchmark's verdict on a replayed conversation (``counterfactual_verdict``): fed the
recorded conversations, it must give the reward tau-bench's own code recomputed for each run,
and it never writes to the shared database it copies from."""

from __future__ import annotations

import copy
from pathlib import Path

from integrations.tau_bench.sources import load_json, runs_from_file
from integrations.tau_bench.world.counterfactual import counterfactual_verdict
from integrations.tau_bench.world.db import consistent_hash, load_domain
from integrations.tau_bench.world.measure import expectations_beside, load_expectations
from tests.testdata import unpacked_testdata


def _beside(runs_file: Path) -> Path:
    found = expectations_beside(runs_file)
    assert found is not None, f"no expectations beside {runs_file}"
    return found


DATA = unpacked_testdata() / "tau-bench"
RUNS = DATA / "airline" / "gpt-4o-airline.json"


def test_recorded_conversations_get_the_benchmarks_reward() -> None:
    records = load_json(RUNS)
    runs = runs_from_file(RUNS, "airline", load_json(DATA / "tools_info.json"))
    expectations = load_expectations(_beside(RUNS), "airline")
    version = "7362a17"  # the databases the airline runs were recorded against
    base = load_domain(DATA / "env-data", version, "airline")
    before = copy.deepcopy(base.tables)
    compared, rewards = 0, {0: 0, 1: 0}
    for record, run in zip(records, runs, strict=True):
        row = expectations[("airline", run.task_id, run.trial)]
        if not row.get("reward_info_present") or row.get("reward_recomputed") is None:
            continue  # an episode the benchmark did not score
        verdict = counterfactual_verdict(run, record["traj"][1:], base)
        assert verdict.counterfactual_reward == int(row["reward_recomputed"]), (
            run.run_id,
            verdict.reason,
        )
        assert verdict.expected_hash == row["gt_final_db_hash"]
        assert verdict.reason  # always says why
        compared += 1
        rewards[verdict.counterfactual_reward] += 1
    assert compared > 50 and rewards[0] > 0 and rewards[1] > 0
    # every write ran on a private copy: the shared base is what was loaded
    assert base.tables == before
    assert consistent_hash(base.tables) == row["initial_db_hash"]


def test_a_conversation_without_the_writes_fails_naming_the_hash() -> None:
    records = load_json(RUNS)
    runs = runs_from_file(RUNS, "airline", load_json(DATA / "tools_info.json"))
    base = load_domain(DATA / "env-data", "7362a17", "airline")
    # the first passing run whose task needs a write, replayed as if the agent only talked
    record, run = next(
        (rec, r)
        for rec, r in zip(records, runs, strict=True)
        if rec.get("reward") == 1.0 and any(a.name in r.write_tools for a in r.expected_actions)
    )
    talk_only = [m for m in record["traj"][1:] if m["role"] in ("user",)]
    talk_only.append({"role": "user", "content": "###STOP###"})
    verdict = counterfactual_verdict(run, talk_only, base)
    assert verdict.counterfactual_reward == 0
    assert "differs from the ground truth's" in verdict.reason
    assert verdict.mutating_calls == 0
