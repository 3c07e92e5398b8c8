"""Benchmark: the reference incident's regression case as a portable capsule. Run with
``.venv/bin/python -m bench.capsule [--repeat N] [--rounds R]``.

Everything is real (``bench.stack``): a Temporal dev server on free ports, workers (steps in
bubblewrap) in this process, the SQLite ledger and the local artifact store in a temporary
directory, the support desk's wrong-customer run (the reference incident) and its case as the
incident would write it.
Measured in the same run, in interleaved rounds (medians):

* the capsule's size (``case export``), against the evidence it carries unpacked;
* ``case run`` of the capsule with ``prompt=v17`` offline (import into a throw-away SQLite
  store, chain check, ``--repeat`` replays in this process), against ``regress`` of the same
  case and candidate through Temporal — and the two verdicts must agree.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.capsule_run import run_capsule
from app.capsules import export_case, open_capsule
from app.regression import GateRepeats, run_gate
from bench.common import Row, emit, machine_load
from bench.stack import bench_stack
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from forensics.failure_facts import gather_failure_facts
from forensics.regression_cases import regression_case_for
from runtime.trajectory import load_trajectory
from stores.bundle import Stores
from stores.case_signing import CaseSigningKey
from stores.sql.incidents import SqlIncidentStore
from stores.sql.support_desk_world import SqlWorldStore
from worker.catalogs import catalogs

CANDIDATE = [("prompt", "v17")]


async def _reference_case(stores: Stores, world: SimulatedWorld) -> str:
    """The wrong-customer run of the reference incident and the case its confirmation writes."""
    for seed in range(30):
        result = await run_scenario(
            world, stores.ledger, stores.artifacts, "wrong-customer", seed=seed
        )
        if result.outcome["emailed"] == "bob@example.com":
            break
    else:
        raise AssertionError("no run emailed the wrong customer")
    case = regression_case_for(
        case_id="case-bench-wrong-customer",
        incident_id="INC-bench-wrong-customer",
        source_run_id=result.run_id,
        facts=await gather_failure_facts(stores.ledger, stores.evidence, result.run_id),
        source=await load_trajectory(stores.ledger, result.run_id),
        description="DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT: prompt v17 looks customers up by phone",
        now=datetime.now(UTC),
    )
    assert case is not None
    await SqlIncidentStore(stores.db).put_case(case)
    return case.case_id


async def _run(repeat: int, rounds: int) -> dict[str, Any]:
    async with bench_stack() as stack:
        stores = stack.stores
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        case_id = await _reference_case(stores, world)
        key = CaseSigningKey(Ed25519PrivateKey.generate(), "bench")
        started = time.perf_counter()
        data, manifest = await export_case(stores, case_id, key)
        export_s = time.perf_counter() - started
        capsule = open_capsule(data, key.public)
        known = catalogs(None)
        async with stack.workers():
            timings, verdicts = await _interleaved(
                stack.client, stores, capsule, known, repeat, rounds, workdir=stack.home
            )
    unpacked = sum(e.size for e in manifest.entries)
    return {
        "bytes": len(data),
        "unpacked_bytes": unpacked,
        "export_s": export_s,
        "events": manifest.notes.get("events"),
        "repeat": repeat,
        "offline_s": statistics.median(timings["offline"]),
        "temporal_s": statistics.median(timings["temporal"]),
        "verdicts": verdicts,
    }


async def _interleaved(
    client: Any,
    stores: Stores,
    capsule: Any,
    known: Any,
    repeat: int,
    rounds: int,
    *,
    workdir: Path,
) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """``rounds`` rounds of both, the order alternating; the verdict of each."""

    # each round's seeds are drawn once and used by both: the same replays, the same verdict
    seeds = {"round": GateRepeats(count=repeat)}

    async def temporal() -> str:
        gate = await run_gate(client, stores, CANDIDATE, repeat=seeds["round"])
        (case,) = gate["cases"]
        return str(case["verdict"])

    async def offline() -> str:
        result = await run_capsule(
            capsule, CANDIDATE, known, repeat=seeds["round"], workdir=workdir
        )
        return str(result["verdict"])

    runs = {"temporal": temporal, "offline": offline}
    timings: dict[str, list[float]] = {name: [] for name in runs}
    verdicts: dict[str, list[str]] = {name: [] for name in runs}
    for r in range(rounds):
        drawn = GateRepeats(count=repeat).draw(repeat)
        seeds["round"] = GateRepeats(seeds=tuple(drawn))
        for name in list(runs) if r % 2 == 0 else list(reversed(runs)):
            started = time.perf_counter()
            verdicts[name].append(await runs[name]())
            timings[name].append(time.perf_counter() - started)
    return timings, verdicts


def main(repeat: int = 5, rounds: int = 3) -> dict[str, Any]:
    r = asyncio.run(_run(repeat, rounds))
    load = machine_load()
    emit(
        Row(
            figure=f"incident capsule of the reference case ({r['events']} events)",
            value=f"{r['bytes'] / 1024:.1f} KiB (export {r['export_s']:.2f} s)",
            baseline=f"its entries unpacked {r['unpacked_bytes'] / 1024:.1f} KiB",
            ratio=r["bytes"] / r["unpacked_bytes"],
            goal="one file",
            met=None,
            load=load,
        )
    )
    # the known-bad prompt never passes, and offline decides each round as regress did
    agree = r["verdicts"]["offline"] == r["verdicts"]["temporal"] and "PASSED" not in set(
        r["verdicts"]["offline"]
    )
    emit(
        Row(
            figure=f"case run offline, prompt=v17 x{r['repeat']} (verdicts "
            f"{'/'.join(r['verdicts']['offline'])})",
            value=f"{r['offline_s']:.2f} s",
            baseline=f"regress through Temporal {r['temporal_s']:.2f} s "
            f"({'/'.join(r['verdicts']['temporal'])})",
            ratio=r["offline_s"] / r["temporal_s"],
            goal="same verdict, no service",
            met=agree,
            load=load,
        )
    )
    return r


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.capsule", description=__doc__)
    parser.add_argument("--repeat", type=int, default=5, help="replays per gate (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args()
    main(args.repeat, args.rounds)
