"""All benchmarks: ``make bench`` or ``.venv/bin/python -m bench``. Not part of the test run."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from bench import bench_canonical, bench_ledger, bench_replay, bench_verify


def main() -> None:
    results = {
        "canonical": bench_canonical.main(),
        "ledger": bench_ledger.main(),
        "replay": bench_replay.main(),
        # runs verification: chain only vs the full check, SQLite and PostgreSQL (exit 1 past 3x)
        "verify_within_target": asyncio.run(bench_verify.main(pg=True)) == 0,
    }
    out = Path(".replaybook") / "bench-results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    print(f"results written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
