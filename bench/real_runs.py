"""Real third-party runs end to end, the figures of ``docs/real-runs.md``:
``.venv/bin/python -m bench.real_runs [--data FOLDER] [--json]``; the data is by default the
repository's own (``tests/data/testdata.tar.xz``, unpacked once by ``tests.testdata``), so a
clone measures itself; ``--data`` names another ``testdata`` folder of the same layout.

Into a fresh SQLite store it imports every tau-bench file (airline and retail) and every OTel
trace, verifies every chain, replays every distinct run in ``recorded`` mode through the real
replay engine in this process (the same prepare → steps → compare the ``Replay`` workflow runs
as activities; going through Temporal 200 times would only measure Temporal), counts the
writes a replay executed (side-effect records in the replay's own run: must be 0) and those it
blocked, and runs the forensics over the imported runs (world replay on) against the recorded
rewards and the failure annotations. It prints one row per source: runs, verified chains,
recorded replay reproduced, writes executed (blocked), agreement with the reward, localisation
(step exact / ±1 / ±2 and AgentRx category, beside the first-Error:-write baseline, and on the
held-out half), runs with duplicate writes flagged, and the seconds the source took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from app.local_replay import engine_for, replay_locally
from ingest.otel import import_otel
from integrations.tau_bench.evaluate import evaluate_runs
from integrations.tau_bench.imported import load_imported_runs
from integrations.tau_bench.importer import import_tau_bench
from integrations.tau_bench.sources import load_annotations
from integrations.tau_bench.world.measure import WorldData, env_version_beside
from models import ReplayMode
from models.duplicates import duplicate_side_effects
from models.evidence import SideEffectRecord
from runtime.trajectory import load_trajectory
from stores.bundle import open_stores
from tests.testdata import unpacked_testdata
from worker.settings import Settings

TAU_SOURCES = (
    ("tau-bench airline (GPT-4o)", "airline", ["airline/gpt-4o-airline.json"]),
    (
        "tau-bench retail (AgentRx)",
        "retail",
        ["retail/agentrx-retail-full.json", "retail/agentrx-retail-failed.json"],
    ),
)
#: the OTel traces' write tool (the task: read the time, write it to a file)
OTEL_WRITE_TOOLS = ("write_file",)


async def _replay_all(stores: Any, run_ids: list[str]) -> dict[str, Any]:
    engine = engine_for(stores)
    reproduced, blocked, executed, failures = 0, 0, 0, []
    sequences: dict[str, list[str]] = {}
    for run_id in run_ids:
        local = await replay_locally(engine, run_id, ReplayMode.RECORDED)
        c = local.comparison
        executed += len(await stores.evidence.records(SideEffectRecord, local.replay_id))
        blocked += local.writes_blocked
        exact = (
            c is not None
            and local.stopped is None
            and local.model_calls == 0
            and local.reproduced
            and c.same_tool_sequence
            and c.answer_similarity == 1.0
            and not c.diffs
        )
        reproduced += exact
        if not exact:
            failures.append(run_id)
        replayed = await load_trajectory(stores.ledger, local.replay_id)
        sequences[run_id] = [call.capability_id for call in replayed.tool_calls]
    return {
        "runs": len(run_ids),
        "reproduced": reproduced,
        "writes_blocked": blocked,
        "writes_executed": executed,
        "not_reproduced": failures,
        "tool_sequences": sequences,
    }


async def _tau_source(stores: Any, tau: Path, domain: str, files: list[str]) -> list[str]:
    run_ids: list[str] = []
    for name in files:
        report = await import_tau_bench(
            stores.ledger,
            stores.artifacts,
            stores.evidence,
            tau / name,
            domain,
            tau / "tools_info.json",
            env_version=env_version_beside(tau / name),
        )
        run_ids += report.run_ids
    return list(dict.fromkeys(run_ids))


async def _otel_source(stores: Any, paths: list[Path]) -> list[str]:
    run_ids: list[str] = []
    for path in paths:
        report = await import_otel(
            stores.ledger, stores.artifacts, stores.evidence, path, OTEL_WRITE_TOOLS
        )
        run_ids += report.run_ids
    return run_ids


async def _measure_source(
    stores: Any, run_ids: list[str], tau: Path, tau_source: bool
) -> dict[str, Any]:
    """Verify, replay (recorded) and judge the runs of one source."""
    intact = sum([(await stores.ledger.verify(r)).intact for r in run_ids])
    replay = await _replay_all(stores, run_ids)
    row: dict[str, Any] = {
        "runs": len(run_ids),
        "verified": intact,
        "recorded_replay": replay,
        "agreement": None,
        "localization": None,
    }
    if tau_source:
        runs = [r for r in await load_imported_runs(stores) if r.run_id in set(run_ids)]
        world = WorldData(tau / "env-data")
        forensics = evaluate_runs(
            runs,
            load_annotations(tau / "retail" / "agentrx-retail-annotations.json"),
            world=world.state_matches,
        )
        loc = forensics["localization"]
        row |= {
            "agreement": forensics["agreement"],
            "disagreeing_run_ids": forensics["disagreeing_run_ids"],
            "signatures": forensics["signatures"],
            "localization": loc and {k: v for k, v in loc.items() if k != "per_run"},
            "duplicates_flagged": forensics["duplicates"]["runs"],
        }
    else:
        flagged = 0
        for run_id in run_ids:
            records = await stores.evidence.records(SideEffectRecord, run_id)
            flagged += bool(duplicate_side_effects(records))
        row["duplicates_flagged"] = flagged
    return row


async def measure(data: Path) -> dict[str, Any]:
    tau = data / "tau-bench"
    sources: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="replaybook-real-runs-") as home:
        settings = Settings.from_env({"REPLAYBOOK_HOME": str(home)})
        async with open_stores(settings.stores) as stores:
            for name, domain, files in TAU_SOURCES:
                started = time.perf_counter()
                run_ids = await _tau_source(stores, tau, domain, files)
                row = await _measure_source(stores, run_ids, tau, True)
                sources[name] = row | {"seconds": round(time.perf_counter() - started, 1)}
            started = time.perf_counter()
            otel_files = sorted((data / "otel-any-agent").glob("*.json"))
            run_ids = await _otel_source(stores, otel_files)
            row = await _measure_source(stores, run_ids, tau, False)
            sequences = row["recorded_replay"].pop("tool_sequences")
            sources["otel-any-agent"] = row | {
                "seconds": round(time.perf_counter() - started, 1),
                "replayed_tool_sequences": sequences,
            }
    for row in sources.values():
        row["recorded_replay"].pop("tool_sequences", None)
    return {"sources": sources}


def _cell(value: Any) -> str:
    return "—" if value is None else str(value)


def _table(r: dict[str, Any]) -> str:
    rows = [
        "| source | runs | verified | recorded replay reproduced | writes executed (blocked) "
        "| agreement with reward | localisation step exact / ±1 / ±2, category (baseline) "
        "| duplicates flagged | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, s in r["sources"].items():
        rep, loc = s["recorded_replay"], s["localization"]
        where = (
            f"{loc['exact']} / {loc['within_1']} / {loc['within_2']}, {loc['category']} "
            f"({loc['baseline_exact']} / {loc['baseline_within_1']} / "
            f"{loc['baseline_within_2']}, {loc['baseline_category']}); held-out "
            f"{loc['held_out']['runs']}: {loc['held_out']['exact']} / "
            f"{loc['held_out']['within_1']} / {loc['held_out']['within_2']}, "
            f"{loc['held_out']['category']}"
            if loc
            else "—"
        )
        rows.append(
            f"| {name} | {s['runs']} | {s['verified']}/{s['runs']} | {rep['reproduced']}/{s['runs']} "
            f"| {rep['writes_executed']} ({rep['writes_blocked']}) | {_cell(s['agreement'])} "
            f"| {where} | {s['duplicates_flagged']} | {s['seconds']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.real_runs", description=__doc__)
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="a testdata folder holding tau-bench/ and otel-any-agent/ "
        "(default: the repository's compressed test data, unpacked once)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = args.data if args.data is not None else unpacked_testdata()
    missing = [d for d in ("tau-bench", "otel-any-agent") if not (data / d).is_dir()]
    if missing:
        parser.error(f"--data {data}: no {' or '.join(f'{d}/' for d in missing)} in it")
    result = asyncio.run(measure(data))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
        otel = result["sources"]["otel-any-agent"]
        print("\nOTel tool sequences:", json.dumps(otel["replayed_tool_sequences"]))
        for name, row in result["sources"].items():
            if row.get("disagreeing_run_ids"):
                print(f"{name} disagreements:", row["disagreeing_run_ids"])
    return result


if __name__ == "__main__":
    main()
