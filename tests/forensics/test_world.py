"""The world replay: our own domain tools over a private database copy, checked against the
benchmark's expectations (final hashes, recorded outputs, mutating calls, drift points)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from integrations.tau_bench.evaluate import evaluate_runs
from integrations.tau_bench.sources import dedupe_runs, load_json, runs_from_file
from integrations.tau_bench.world.common import calculate
from integrations.tau_bench.world.db import World, consistent_hash, load_domain
from integrations.tau_bench.world.measure import (
    WorldData,
    expectations_beside,
    load_expectations,
    measure_world,
)
from integrations.tau_bench.world.replay import tools_for
from models.errors import InvalidInputError
from tests.testdata import unpacked_testdata


def _beside(runs_file: Path) -> Path:
    found = expectations_beside(runs_file)
    assert found is not None, f"no expectations beside {runs_file}"
    return found


ROOT = Path(__file__).resolve().parents[2]
DATA = unpacked_testdata() / "tau-bench"
ENV = DATA / "env-data"
RUN_FILES = [
    ("airline", "airline/gpt-4o-airline.json"),
    ("retail", "retail/agentrx-retail-full.json"),
    ("retail", "retail/agentrx-retail-failed.json"),
]


@pytest.fixture(scope="module")
def world_data() -> WorldData:
    return WorldData(ENV)


@pytest.fixture(scope="module")
def all_runs() -> tuple[list, dict]:
    tools_info = load_json(DATA / "tools_info.json")
    runs, expectations = [], {}
    for domain, name in RUN_FILES:
        runs += runs_from_file(DATA / name, domain, tools_info)
        expectations.update(load_expectations(_beside(DATA / name), domain))
    return runs, expectations


# pure: the hash of a copy-on-write world


def _tiny_db(tmp_path: Path) -> Path:
    folder = tmp_path / "v1" / "retail"
    folder.mkdir(parents=True)
    tables = {
        "orders": {"#1": {"status": "pending", "items": [1, 2.5]}, "#2": {"status": "x"}},
        "products": {"p": {"name": "é", "variants": {}}, "q": {"name": "q"}},
        "users": {"u1": {"payment_methods": {"g": {"source": "gift_card", "balance": 1}}}},
    }
    for name, rows in tables.items():
        (folder / f"{name}.json").write_text(json.dumps(rows), encoding="utf-8")
    return tmp_path


def test_world_hash_equals_reference_hash_after_edits_and_inserts(tmp_path: Path) -> None:
    base = load_domain(_tiny_db(tmp_path), "v1", "retail")
    world = World(base)
    assert world.hash() == consistent_hash(world.snapshot()) == base.initial_hash
    world.edit("orders", "#1")["status"] = "cancelled"
    world.put("orders", "#0", {"status": "new"})  # sorts first
    world.put("orders", "#9", {"status": "new"})  # sorts last
    world.put("users", "u0", {"payment_methods": {}})  # a 1-row table gains a row
    assert world.hash() == consistent_hash(world.snapshot()) != base.initial_hash
    # the base was never changed: a fresh world has the initial hash again
    assert base.tables["orders"]["#1"]["status"] == "pending"
    assert World(base).hash() == consistent_hash(World(base).snapshot()) == base.initial_hash


def test_refused_write_changes_nothing_and_arguments_are_copied(tmp_path: Path) -> None:
    base = load_domain(_tiny_db(tmp_path), "v1", "retail")
    tools = tools_for(World(base))
    answer = tools.call("cancel_pending_order", {"order_id": "#2", "reason": "no longer needed"})
    assert answer == "Error: non-pending order cannot be cancelled"
    assert tools.world.hash() == base.initial_hash
    address = {
        "user_id": "u1",
        "address1": "1 A St",
        "address2": "",
        "city": "C",
        "state": "S",
        "country": "USA",
        "zip": "1",
    }
    tools.call("modify_user_address", address)
    changed = tools.world.hash()
    address["city"] = "mutated later by the caller"
    assert tools.world.hash() == changed
    assert tools.call("nonexistent", {}) == "Unknown action nonexistent"
    assert tools.call("get_user_details", {"nope": 1}).startswith("Error: ")


def test_calculate_prints_floats_and_refuses_code() -> None:
    assert calculate("(122 + 127) * 2") == "498.0"
    assert calculate("(195.11 - 180.93) + (499.28 - 471.82)") == "41.64"
    with pytest.raises(Exception, match=r"^invalid characters in expression$"):
        calculate("__import__('os')")


# the real data


def test_base_hashes_reproduce_the_expectations_initial_hashes(all_runs: tuple) -> None:
    _, expectations = all_runs
    initial = {(d, row["env_version"].split("@")[1][:7]) for (d, _, _), row in expectations.items()}
    hashes = {row["initial_db_hash"] for row in expectations.values()}
    ours = {load_domain(ENV, version, domain).initial_hash for domain, version in initial}
    assert ours == hashes and len(hashes) == 2


def test_world_replay_agrees_with_every_expectation(world_data: WorldData, all_runs: tuple) -> None:
    runs, expectations = all_runs
    result = measure_world(runs, world_data, expectations)
    assert result["runs"] == result["runs_with_expectations"] == 218
    assert result["problems"] == []
    assert result["final_hash_matches"] == 1.0  # the bar: 100% of runs
    assert result["expected_actions_hash_matches"] == 1.0
    assert result["mutating_calls_agree"] == 1.0
    calls = [len(expectations[(r.domain, r.task_id, r.trial)]["tool_calls"]) for r in runs]
    assert result["outputs_compared"] == sum(calls) == 1505
    assert result["output_reproduction"] == 1.0
    # against the other database version: the first divergent tool message is the expected one
    assert result["drift_point_agreement"] == 1.0
    assert 0 < result["drift_runs_diverging"] < result["runs"]
    # nothing leaked into the shared base databases
    for (domain, version), base in world_data._bases.items():
        assert consistent_hash(base.tables) == load_domain(ENV, version, domain).initial_hash


def test_drift_names_the_user_details_answer(world_data: WorldData, all_runs: tuple) -> None:
    runs, expectations = all_runs
    run = next(r for r in runs if r.run_id == "tau-airline-2-0")
    drift = world_data.replay(run, "59a200c", with_expected=False)
    expected = expectations[("airline", "2", 0)]["drift_check"]["first_divergent_tool_msg_index"]
    assert drift.first_divergent_tool_index == expected == 5
    diverging = next(c for c in drift.calls if c.reproduced is False)
    assert diverging.name == "get_user_details"
    assert '"province"' in (diverging.recorded or "") and '"province"' not in (
        diverging.output or ""
    )


def test_world_state_makes_every_predicted_verdict_agree(
    world_data: WorldData, all_runs: tuple
) -> None:
    runs, _ = dedupe_runs(all_runs[0])
    without = evaluate_runs(runs)
    with_world = evaluate_runs(runs, world=world_data.state_matches)
    # the two runs where an expected action itself fails are only decided by the world
    assert {"tau-retail-13-13", "tau-retail-64-64"} <= set(without["disagreeing_run_ids"])
    assert with_world["disagreeing_run_ids"] == []
    assert with_world["agreement"] == 1.0


def test_cli_world_and_bad_version(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))}
    env |= {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_LOG_FORMAT": "json"}
    base = [
        str(Path(sys.executable).parent / "replaybook"),
        "forensics",
        "world",
        "--env-data",
        str(ENV),
        "--file",
        f"retail={DATA / 'retail/agentrx-retail-full.json'}",
        "--tools-info",
        str(DATA / "tools_info.json"),
    ]
    result = subprocess.run(
        [*base, "--json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["runs"], summary["final_hash_matches"]) == (66, 1.0)
    assert summary["drift_point_agreement"] == 1.0
    one = subprocess.run(
        [*base, "tau-retail-1-1", "--db-version", "7362a17", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert one.returncode == 0, one.stderr
    replay = json.loads(one.stdout)
    assert replay["db_version"] == "7362a17" and replay["first_divergent_tool_message"] == 7
    bad = subprocess.run(
        [*base, "tau-retail-1-1", "--db-version", "nope"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown database version 'nope'" in bad.stderr


# a run that books more than once (written with the benchmark's own tool code, see its README)

WRITTEN = unpacked_testdata() / "replaybook-written"
MULTI = WRITTEN / "airline-multi-booking.json"


def test_bookings_draw_ids_in_sequence_and_errors_read_as_the_benchmark_prints_them(
    world_data: WorldData,
) -> None:
    runs = runs_from_file(MULTI, "airline", load_json(DATA / "tools_info.json"))
    expectations = load_expectations(_beside(MULTI), "airline")
    assert runs[0].env_version == "7362a17"  # from the expectations beside the file
    result = measure_world(runs, world_data, expectations)
    assert result["problems"] == [] and result["output_reproduction"] == 1.0
    assert result["outputs_compared"] == 17
    assert result["final_hash_matches"] == result["mutating_calls_agree"] == 1.0
    assert result["expected_actions_hash_matches"] == result["drift_point_agreement"] == 1.0
    answers = [m["content"] for m in load_json(MULTI)[0]["traj"][9:20:2]]
    ids = [json.loads(a)["reservation_id"] for a in answers if a.startswith("{")]
    assert ids == ["HATHAT", "HATHAU", "HATHAV", "HATHAV", "HATHAU"]


def test_the_database_version_comes_from_the_run(world_data: WorldData, tmp_path: Path) -> None:
    run = runs_from_file(MULTI, "airline", load_json(DATA / "tools_info.json"))[0]
    assert world_data.replay(run).db_version == "7362a17"
    assert world_data.replay(run.model_copy(update={"env_version": "59a200c"})).db_version == (
        "59a200c"
    )
    unknown = run.model_copy(update={"env_version": None})
    with pytest.raises(InvalidInputError, match="--env-version"):
        world_data.replay(unknown)
    # a folder with one version of the domain needs no metadata
    (tmp_path / "v1").symlink_to(ENV / "7362a17")
    assert WorldData(tmp_path).replay(unknown).db_version == "v1"


def test_cli_world_of_an_imported_run_that_books_several_times(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "AWS_"))}
    env |= {"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_LOG_FORMAT": "json"}
    cli = str(Path(sys.executable).parent / "replaybook")
    imported = subprocess.run(
        [cli, "import", "tau-bench", str(MULTI), "--domain", "airline", "--tools-info",
         str(DATA / "tools_info.json"), "--env-version", "7362a17", "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    (run_id,) = json.loads(imported.stdout)["run_ids"]
    world = subprocess.run(
        [cli, "forensics", "world", run_id, "--env-data", str(ENV), "--json"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert world.returncode == 0, world.stderr
    replay = json.loads(world.stdout)
    expected = load_expectations(_beside(MULTI), "airline")[("airline", "900", 0)]
    assert replay["db_version"] == "7362a17"
    assert replay["outputs_reproduced"] == replay["outputs_compared"] == 17
    assert replay["final_hash"] == expected["final_db_hash_after_replay"]
    assert replay["state_matches_expected"] is True
