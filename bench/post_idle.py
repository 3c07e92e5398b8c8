"""Benchmark context: what this machine charges the first work after an idle wait.

``bench.bench_recording`` times a recorded step whose provider answers after 100 ms against
the provider alone. On a virtual machine the CPU's caches are cold when the loop wakes after
such a wait: the first call of anything runs several times slower than the same call made
again at once (2026-12-03, 100 ms idle then a call, medians of 25: json.dumps of a small dict
73 against 7 us, sha256 of 1 KB 63 against 2.6 us, a one-field pydantic model 45 against
2.2 us, sum(range(200)) 6.0 against 1.4 us). The recorded step pays that on the recording work
it does after its provider answers; the bare provider does nothing then. This row measures it
on recording's own kind of work, beside the 100 ms rows, so they can be read against it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench.common import Row, Spread, emit

#: how many idle-then-call samples the post-idle row takes
IDLE_SAMPLES = 20


async def post_idle_calls(idle_s: float, samples: int = IDLE_SAMPLES) -> dict[str, Any]:
    """Recording's kind of work (a ``ToolFixture`` validated, its canonical hash) done right
    after the loop slept ``idle_s``, and the same work done again at once: seconds of each,
    ``samples`` times."""
    from datetime import UTC, datetime

    from models.enums import SideEffectClass, ToolOutcome
    from models.evidence import ToolFixture

    now = datetime.now(UTC)
    fields: dict[str, Any] = {
        "tool_call_id": "call-1",
        "capability_id": "counter.read",
        "request_hash": "sha256:" + "0" * 64,
        "sanitized_request": {"i": 5},
        "sanitized_response": {"value": 5},
        "outcome": ToolOutcome.SUCCESS,
        "started_at": now,
        "completed_at": now,
        "side_effect_class": SideEffectClass.READ,
    }

    def work() -> None:
        ToolFixture(**fields).record_hash()

    first: list[float] = []
    again: list[float] = []
    for _ in range(samples):
        await asyncio.sleep(idle_s)
        t0 = time.perf_counter()
        work()
        t1 = time.perf_counter()
        work()
        again.append(time.perf_counter() - t1)
        first.append(t1 - t0)
    return {"first_s": first, "again_s": again, "idle_s": idle_s}


def post_idle_row(r: dict[str, Any], load: str) -> Row:
    first, again = Spread.of(r["first_s"]), Spread.of(r["again_s"])
    return emit(
        Row(
            figure=f"this machine after a {r['idle_s'] * 1e3:.0f} ms idle: a ToolFixture and its "
            f"canonical hash, the first time (median of {len(r['first_s'])}; what the recorded "
            "step above pays and the bare provider does not)",
            value=first.text(1e6, "us", 1),
            baseline=f"the same again at once {again.text(1e6, 'us', 1)}",
            ratio=first.median / again.median,
            goal="— (context for the 100 ms rows)",
            met=None,
            load=load,
        )
    )
