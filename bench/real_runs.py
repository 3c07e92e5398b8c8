"""Real third-party runs end to end, the figures of ``docs/real-runs.md``:
``.venv/bin/python -m bench.real_runs [--data ../shared/testdata] [--json]``.

Into a fresh SQLite store it imports every tau-bench file (airline and retail) and every OTel
trace, verifies every chain, replays every distinct run in ``recorded`` mode through the real
replay engine in this process (the same prepare → steps → compare the ``Replay`` workflow runs
as activities; going through Temporal 200 times would only measure Temporal), counts the
writes a replay executed (side-effect records in the replay's own run: must be 0) and those it
blocked, and runs the forensics over the imported runs (world replay on) against the recorded
rewards and the failure annotations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
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
from models.evidence import SideEffectRecord
from runtime.trajectory import load_trajectory
from stores.bundle import open_stores
from worker.settings import Settings

TAU_FILES = (
    ("airline", "airline/gpt-4o-airline.json"),
    ("retail", "retail/agentrx-retail-full.json"),
    ("retail", "retail/agentrx-retail-failed.json"),
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


async def measure(data: Path) -> dict[str, Any]:
    tau = data / "tau-bench"
    with tempfile.TemporaryDirectory(prefix="replaybook-real-runs-") as home:
        settings = Settings.from_env({"REPLAYBOOK_HOME": str(home)})
        async with open_stores(settings.stores) as stores:
            started = time.perf_counter()
            tau_ids: list[str] = []
            for domain, name in TAU_FILES:
                report = await import_tau_bench(
                    stores.ledger,
                    stores.artifacts,
                    stores.evidence,
                    tau / name,
                    domain,
                    tau / "tools_info.json",
                    env_version=env_version_beside(tau / name),
                )
                tau_ids += report.run_ids
            otel_ids: dict[str, str] = {}
            for path in sorted((data / "otel-any-agent").glob("*.json")):
                report = await import_otel(
                    stores.ledger, stores.artifacts, stores.evidence, path, OTEL_WRITE_TOOLS
                )
                otel_ids |= {run_id: path.name for run_id in report.run_ids}
            import_seconds = time.perf_counter() - started
            distinct = list(dict.fromkeys(tau_ids))
            everything = distinct + list(otel_ids)
            intact = sum([(await stores.ledger.verify(r)).intact for r in everything])
            started = time.perf_counter()
            tau_replay = await _replay_all(stores, distinct)
            otel_replay = await _replay_all(stores, list(otel_ids))
            replay_seconds = time.perf_counter() - started
            otel_effects = {
                otel_ids[r]: len(await stores.evidence.records(SideEffectRecord, r))
                for r in otel_ids
            }
            runs = await load_imported_runs(stores)
            world = WorldData(tau / "env-data")
            forensics = evaluate_runs(
                runs,
                load_annotations(tau / "retail" / "agentrx-retail-annotations.json"),
                world=world.state_matches,
            )
    otel_sequences = {otel_ids[r]: s for r, s in otel_replay.pop("tool_sequences").items()}
    tau_replay.pop("tool_sequences")
    return {
        "tau_bench": {
            "files_runs": len(tau_ids),
            "distinct_runs": len(distinct),
            "by_domain": dict(Counter(r.split("-")[1] for r in distinct)),
            "recorded_replay": tau_replay,
        },
        "otel": {
            "runs": len(otel_ids),
            "recorded_replay": otel_replay,
            "replayed_tool_sequences": otel_sequences,
            "side_effects_per_trace": otel_effects,
        },
        "chains_intact": f"{intact}/{len(everything)}",
        "import_seconds": round(import_seconds, 1),
        "replay_seconds": round(replay_seconds, 1),
        "forensics": {k: forensics[k] for k in ("agreement", "disagreeing_run_ids", "signatures")}
        | {"localization": {k: v for k, v in forensics["localization"].items() if k != "per_run"}},
    }


def _table(r: dict[str, Any]) -> str:
    t, o, f = r["tau_bench"], r["otel"], r["forensics"]
    loc = f["localization"]
    top = ", ".join(f"{k} {v}" for k, v in list(f["signatures"].items())[:4])
    rows = [
        "| source | runs | chains intact | recorded replay reproduced | writes executed (blocked) | agreement with reward | localisation exact / ±2 (baseline) | top signatures |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| tau-bench ({', '.join(f'{k} {v}' for k, v in t['by_domain'].items())}) | {t['distinct_runs']} "
        f"({t['files_runs']} in the files) | {r['chains_intact']} (all) "
        f"| {t['recorded_replay']['reproduced']}/{t['distinct_runs']} "
        f"| {t['recorded_replay']['writes_executed']} ({t['recorded_replay']['writes_blocked']}) "
        f"| {f['agreement']} | {loc['exact']} / {loc['within_2']} "
        f"({loc['baseline_exact']} / {loc['baseline_within_2']}) | {top} |",
        f"| OTel ({o['runs']} frameworks) | {o['runs']} | (above) "
        f"| {o['recorded_replay']['reproduced']}/{o['runs']} "
        f"| {o['recorded_replay']['writes_executed']} ({o['recorded_replay']['writes_blocked']}) "
        "| — | — | — |",
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.real_runs", description=__doc__)
    parser.add_argument("--data", default="../shared/testdata", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.data))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_table(result))
        print(f"\nimport {result['import_seconds']} s, replay {result['replay_seconds']} s")
        print("OTel tool sequences:", json.dumps(result["otel"]["replayed_tool_sequences"]))
        print("OTel side effects per trace:", json.dumps(result["otel"]["side_effects_per_trace"]))
        print("disagreements:", result["forensics"]["disagreeing_run_ids"])
    return result


if __name__ == "__main__":
    main()
