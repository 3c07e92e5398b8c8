"""The tau-bench importer on the real runs: every run imports and verifies intact on SQLite and
PostgreSQL, a second import creates nothing, ``recorded`` replay reproduces every run (tool
sequence, arguments, outputs, final message) with zero writes executed, in process for all and
through Temporal for a sample; malformed input is refused naming its position."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from app.local_replay import engine_for, replay_locally
from integrations.tau_bench.evaluate import evaluate_runs
from integrations.tau_bench.forensics import compare_expected
from integrations.tau_bench.imported import load_imported_runs
from integrations.tau_bench.importer import (
    convert_tau_file,
    import_tau_bench,
    list_tau_runs,
    load_tau_run,
)
from integrations.tau_bench.sources import dedupe_runs, runs_from_file
from models import ReplayMode, ReplayStatus
from models.errors import InvalidInputError
from models.replay_flow import ReplayPlan
from runtime.completeness import evidence_completeness
from stores.artifacts import LocalArtifactStore
from stores.sql.database import open_database
from stores.sql.evidence import SqlEvidenceReader
from stores.sql.ledger import SqlLedger
from tests.fixtures_import import TAU, TAU_FILES, ImportStores

TOOLS = TAU / "tools_info.json"


async def _import_all(stores) -> tuple[list[str], float]:
    started = time.perf_counter()
    run_ids: list[str] = []
    for path, domain in TAU_FILES:
        report = await import_tau_bench(
            stores.ledger, stores.artifacts, stores.evidence, path, domain, TOOLS
        )
        assert len(report.run_ids) == len(json.loads(path.read_text()))
        run_ids += report.run_ids
    return run_ids, time.perf_counter() - started


async def test_every_run_imports_verifies_and_a_second_import_creates_nothing(stores) -> None:
    run_ids, seconds = await _import_all(stores)
    print(f"\nimported {len(run_ids)} tau-bench runs in {seconds:.1f}s")
    assert len(run_ids) == 132 + 66 + 20
    for run_id in set(run_ids):
        verification = await stores.ledger.verify(run_id)
        assert verification.intact, (run_id, verification.summary())
    completeness = await evidence_completeness(
        stores.ledger, stores.evidence, stores.artifacts, run_ids[0]
    )
    assert completeness.confidence.value == "LIMITED"
    assert "environment" in completeness.missing and "prompt" not in completeness.missing

    heads = {r: (await stores.ledger.events(r))[-1].sequence for r in set(run_ids)}
    again, _ = await _import_all(stores)
    assert again == run_ids
    assert {r: (await stores.ledger.events(r))[-1].sequence for r in set(run_ids)} == heads
    await _forensics_from_the_store_equal_the_files(stores, set(run_ids))


async def _forensics_from_the_store_equal_the_files(stores, run_ids: set[str]) -> None:
    """``forensics evaluate`` reads the imported runs back from the ledger; its verdicts are the
    ones computed straight from the source files (nothing lost on the way in)."""
    tools_info = json.loads((TAU / "tools_info.json").read_text())
    from_files, _ = dedupe_runs(
        [run for path, domain in TAU_FILES for run in runs_from_file(path, domain, tools_info)]
    )
    # The session's database is shared by the import tests: other tests' tau-bench runs (tau2-bench
    # simulations are imported as tau-bench records), whose artifacts are in their own folders,
    # may be there too, so compare (and load) these runs only.
    assert run_ids <= set(await list_tau_runs(stores.ledger))
    from_store = [(await load_imported_runs(stores, run_id))[0] for run_id in sorted(run_ids)]
    key = lambda r: (r.domain, r.task_id, r.trial)  # noqa: E731
    assert sorted(map(key, from_store)) == sorted(map(key, from_files))
    by_key = {key(r): r for r in from_files}
    for run in from_store:
        mine, theirs = compare_expected(run), compare_expected(by_key[key(run)])
        assert mine.model_dump(exclude={"run_id"}) == theirs.model_dump(exclude={"run_id"})
    assert evaluate_runs(from_store)["agreement"] >= 0.95


async def test_load_tau_run_gives_forensics_the_source_and_the_writes(stores) -> None:
    path, domain = TAU_FILES[0]
    raw = json.loads(path.read_text())
    report = await import_tau_bench(
        stores.ledger, stores.artifacts, stores.evidence, path, domain, TOOLS
    )
    expectations = [
        json.loads(line)
        for line in (TAU / "airline" / "gpt-4o-airline.expectations.jsonl").read_text().splitlines()
    ]
    for run_id, source, expected in zip(report.run_ids, raw, expectations, strict=True):
        run = await load_tau_run(stores.ledger, stores.artifacts, stores.evidence, run_id)
        assert (run.task_id, run.trial, run.reward) == (
            source["task_id"],
            source["trial"],
            source["reward"],
        )
        assert run.messages == source["traj"]  # index-aligned with the source
        assert run.expected_actions == source["info"]["task"]["actions"]
        declared = [c for c in expected["tool_calls"] if c["declared_write"]]
        assert [(w.tool_index, w.name) for w in run.write_calls] == [
            (c["tool_msg_index"], c["name"]) for c in declared
        ]
        for write, call in zip(run.write_calls, declared, strict=True):
            # FAILED exactly when the output reports an error, and a failed write changed
            # nothing (a CONFIRMED one may also change nothing: same values written again)
            assert (write.status == "FAILED") == str(write.output).startswith("Error"), run_id
            assert not (write.status == "FAILED" and call["mutated_db"]), (run_id, write)


@pytest.fixture
async def sqlite_stores(tmp_path: Path):
    db = await open_database(f"sqlite+aiosqlite:///{tmp_path / 'all.db'}")
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    yield ImportStores(db, SqlLedger(db, artifacts), artifacts, SqlEvidenceReader(db))
    await db.dispose()


async def test_recorded_replay_reproduces_a_sample_of_runs_in_process(sqlite_stores) -> None:
    """Every sixth imported run (both domains, ~37 runs); `python -m bench.real_runs` replays
    all of them (it took most of the suite's time on a loaded machine)."""
    run_ids, _ = await _import_all(sqlite_stores)
    engine = engine_for(sqlite_stores)
    started = time.perf_counter()
    failures = []
    blocked = 0
    for run_id in list(dict.fromkeys(run_ids))[::6]:
        local = await replay_locally(engine, run_id, ReplayMode.RECORDED)
        c = local.comparison
        blocked += local.writes_blocked
        if not (
            c is not None
            and local.stopped is None
            and local.model_calls == 0
            and local.reproduced
            and c.same_tool_sequence
            and c.answer_similarity == 1.0
            and c.diffs == ()
        ):
            failures.append((run_id, local.stopped, c and c.diffs[:2]))
    print(
        f"\nreplayed {len(set(run_ids)) // 6} runs in process in {time.perf_counter() - started:.1f}s"
    )
    assert failures == []
    assert blocked > 0  # writes were attempted and every one blocked (none reached anything)


async def test_recorded_replay_through_temporal_for_a_sample(replay_stack) -> None:
    stores = replay_stack.stores
    path, domain = TAU_FILES[0]
    report = await import_tau_bench(
        stores.ledger, stores.artifacts, stores.evidence, path, domain, TOOLS
    )
    sample = report.run_ids[:: len(report.run_ids) // 8][:8]
    for run_id in sample:
        outcome = await replay_stack.replay(
            ReplayPlan(
                replay_id=f"tau-replay-{uuid.uuid4().hex[:10]}",
                source_run_id=run_id,
                mode=ReplayMode.RECORDED,
            )
        )
        assert outcome.status is ReplayStatus.COMPLETED, outcome.reason
        c = outcome.comparison
        assert (
            c.same_tool_sequence
            and c.same_outcome
            and c.same_side_effects
            and c.answer_similarity == 1.0
        )
        assert (
            outcome.reproduced
            and outcome.writes_executed == 0
            and outcome.budget_used.model_calls == 0
        )
        assert outcome.confidence.value == "LIMITED"


def test_malformed_files_are_refused_naming_the_position(tmp_path: Path) -> None:
    bad = tmp_path / "runs.json"
    bad.write_text(
        json.dumps(
            [
                {
                    "task_id": 1,
                    "trial": 0,
                    "traj": [{"role": "system", "content": "p"}, {"content": "x"}],
                }
            ]
        )
    )
    with pytest.raises(
        InvalidInputError, match=r"runs\[0\]\.traj\[1\]: expected a message with a role"
    ):
        convert_tau_file(bad, "airline", TOOLS)
    bad.write_text(
        json.dumps([{"task_id": 1, "trial": 0, "traj": [{"role": "tool", "content": "x"}]}])
    )
    with pytest.raises(
        InvalidInputError, match=r"runs\[0\]\.traj\[0\]: a tool result with no tool call"
    ):
        convert_tau_file(bad, "airline", TOOLS)
    bad.write_text('[{"task_id": 1,\n "trial": }]')
    with pytest.raises(InvalidInputError, match="invalid JSON at line 2"):
        convert_tau_file(bad, "airline", TOOLS)
    with pytest.raises(InvalidInputError, match=r"write_tools\.banking: missing"):
        convert_tau_file(TAU_FILES[0][0], "banking", TOOLS)
