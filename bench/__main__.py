"""All benchmarks: ``make bench`` or ``.venv/bin/python -m bench``. Not part of the test run.

Prints one table (``bench.common.TABLE_HEADER``): each figure, its baseline measured in the same
run (interleaved rounds, medians where a figure is timed repeatedly), their ratio, the goal, and
the machine's load when it was taken. ``docs/performance.md`` keeps the latest table.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import (
    bench_canonical,
    bench_ingest,
    bench_ledger,
    bench_pool,
    bench_recording,
    bench_replay,
    bench_source,
    bench_verify,
)
from bench.common import TABLE_HEADER, Row, emit, machine_load

#: rows of issue 21's table this bench does not measure yet (printed as such, never guessed)
NOT_MEASURED: tuple[tuple[str, str], ...] = ()


def _part(name: str, run: Callable[[], Any]) -> Any:
    """One benchmark; a part that fails (a busy machine, a missing service) is printed as a
    row saying so, and the others still run."""
    try:
        return run()
    except Exception as exc:  # reported in the table, never hidden
        emit(
            Row(
                f"{name}: failed",
                f"{type(exc).__name__}: {exc}"[:200],
                "—",
                None,
                "—",
                None,
                machine_load(),
            )
        )
        return {"failed": repr(exc)}


def main() -> None:
    print(TABLE_HEADER, flush=True)
    results = {
        "canonical": _part("canonical", bench_canonical.rows),
        "ledger": _part("ledger appends", bench_ledger.main),
        "ingest": _part("HTTP ingestion", bench_ingest.main),
        # chain only from raw rows vs the full check, SQLite and PostgreSQL
        "verify": _part("verification", lambda: asyncio.run(bench_verify.main(pg=True))),
        # gateway time − provider time per call: support-desk runs (SQLite, PostgreSQL) and a
        # 1,000-step synthetic run
        "recording": _part("recording overhead per call", bench_recording.main),
        "source": _part("10,000-step recording and source load", bench_source.main),
        "pool": _part("child replay start-up", bench_pool.main),
        "replay": _part("replay through Temporal", bench_replay.main),
    }
    for figure, goal in NOT_MEASURED:
        emit(Row(figure, "not measured by this bench", "—", None, goal, None, machine_load()))
    out = Path(".replaybook") / "bench-results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"results written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
