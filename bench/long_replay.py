"""``python -m bench --only long_replay`` (or ``python -m bench.long_replay [STEPS]``): a long
ingested run whose replay diverges ends with a verdict through Temporal (issue 31 item 8).

An agent reports a run of STEPS steps (12,000 by default) through the ingestion core, as the
HTTP API does: a task, then turns of a model call asking for a READ tool and the tool's
answers (a ``model`` step and a ``tools`` step each, two lookups a turn), a report filed (a WRITE) and an answer.
Its header declares ``max_model_calls`` of 50 (a limit its own runtime did not enforce), so
the replayed loop stops where the recording went on: the replay
never files the report (NOT_REPRODUCED: another side effect) and differs from the source in
every step after that point, thousands of differences. The replay runs through the real Temporal dev
server and a replay worker with the default sandbox (recorded playback, continuing as new);
before issue 31 the comparison was returned as a Temporal payload and the replay failed with
TMPRL1103. Printed: the verdict, the differences, the size of the comparison's artifact and of
the outcome Temporal carries, and the times. The baseline in the same run is the same source
replayed without divergence (no declared limit: a copy ingested under another id), so the row
says what the divergence costs. ``tests/workflows/test_long_replay.py`` runs a 400-step one.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.contrib.pydantic import pydantic_data_converter

from bench.common import Row, emit, machine_load
from ingest import ingest_events, ingest_run
from models.ingest import IngestEventBatch, IngestRunHeader, IngestTool

START = datetime(2025, 6, 1, 8, 0, tzinfo=UTC)
#: events sent per ingestion batch (the API takes at most 8 MiB a request)
BATCH = 1_000
TEMPORAL_PAYLOAD_LIMIT = 2 * 1024 * 1024
USAGE = {"prompt_tokens": 20, "completion_tokens": 5}
LOOKUP = "lookup_customer_account_record"
#: the model calls the diverging run's header declares (the replay stops there); early, so
#: that the replay stays far under the sandbox's write quota whatever the run's length
DECLARED_CALLS = 50


def long_run_events(steps: int) -> list[dict[str, Any]]:
    """An agent that looks records up, two a turn, files a report (a WRITE) and answers:
    about ``steps`` steps (a model step and a tools step a turn)."""
    events: list[dict[str, Any]] = []
    clock = START

    def add(event: dict[str, Any]) -> None:
        nonlocal clock
        clock += timedelta(milliseconds=500)
        events.append({**event, "sequence": len(events) + 1, "at": clock.isoformat()})

    def turn(calls: list[tuple[str, str, dict[str, Any], str]]) -> None:
        """One model call asking for ``calls`` at once, then their answers (one tools step)."""
        asked = [{"id": i, "name": name, "arguments": args} for i, name, args, _ in calls]
        add({"type": "model_call", "model": "agent-1", "tool_calls": asked, "usage": USAGE})
        for call_id, name, arguments, output in calls:
            add(
                {
                    "type": "tool_call",
                    "tool_call_id": call_id,
                    "name": name,
                    "arguments": arguments,
                    "output": output,
                    "outcome": "SUCCESS",
                }
            )

    turns = max((steps - 3) // 2, 1)
    for index in range(turns):
        # two lookups a turn (parallel tool calls): a profile and a history
        turn(
            [
                (f"c{index}-{part}", LOOKUP, _record(index, part), f"{part} {index}: ok")
                for part in ("profile", "history")
            ]
        )
    turn([("report", "file_report", {"checked": turns}, "report filed")])
    add(
        {
            "type": "model_call",
            "model": "agent-1",
            "content": "All records checked.",
            "usage": USAGE,
        }
    )
    add({"type": "run_end", "outcome": {"checked": turns}})
    return events


def _record(index: int, part: str) -> dict[str, Any]:
    return {"account": f"customer-account-{index:06d}-eu-west-1", "part": part}


def long_run_header(run_id: str, model_calls: int | None) -> IngestRunHeader:
    return IngestRunHeader(
        run_id=run_id,
        started_at=START,
        system_prompt="You check every record with the lookup tool, then say you are done.",
        tools=(
            IngestTool(name=LOOKUP, side_effect_class="READ"),
            IngestTool(name="file_report", side_effect_class="WRITE"),
        ),
        initial_messages=({"role": "user", "content": "Check all records."},),
        user_turns=False,
        labels={"agent": "long-checker"},
        max_model_calls=model_calls,
    )


async def ingest_long_run(stores: Any, steps: int, *, diverging: bool) -> str:
    """Ingest the run (in batches, as a client would); its id."""
    events = long_run_events(steps)
    calls = sum(1 for e in events if e["type"] == "model_call")
    run_id = f"long-{'div' if diverging else 'same'}-{uuid.uuid4().hex[:8]}"
    limit = min(DECLARED_CALLS, calls) if diverging else calls
    await ingest_run(stores.ledger, stores.artifacts, long_run_header(run_id, limit))
    for start in range(0, len(events), BATCH):
        batch = IngestEventBatch.model_validate({"events": events[start : start + BATCH]})
        await ingest_events(stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events)
    return run_id


async def replay_through_temporal(steps: int, *, diverging: bool = True) -> dict[str, Any]:
    """Ingest the run (diverging: its replay stops at the declared model calls; else every
    step is replayed), replay it through Temporal (default sandbox), and measure."""
    from bench.stack import bench_stack
    from models import ExecutionEventType, ReplayMode
    from models.replay import ReplayComparison
    from models.replay_flow import ReplayPlan

    async with bench_stack() as stack:
        stores = stack.stores
        began = time.perf_counter()
        run_id = await ingest_long_run(stores, steps, diverging=diverging)
        ingested = time.perf_counter() - began
        plan = ReplayPlan(
            replay_id=f"long-replay-{uuid.uuid4().hex[:8]}",
            source_run_id=run_id,
            mode=ReplayMode.RECORDED,
        )
        async with stack.workers():
            began = time.perf_counter()
            outcome = await stack.replay(plan)
            replayed = time.perf_counter() - began
        (payload,) = pydantic_data_converter.payload_converter.to_payloads([outcome])
        carried = outcome.comparison
        whole_bytes = 0
        if carried is not None and carried.ref is not None:
            whole = await stores.artifacts.get(carried.ref)
            whole_bytes = len(whole)
            total = len(ReplayComparison.model_validate_json(whole).diffs)
            assert total == (carried.diffs_total or len(carried.diffs)), total
        source_steps = sum(
            1
            for e in await stores.ledger.events(run_id)
            if e.type is ExecutionEventType.STEP_COMPLETED
        )
    return {
        "source_steps": source_steps,
        "status": outcome.status.value,
        "verdict": outcome.verdict.value if outcome.verdict else None,
        "reason": outcome.reason,
        "steps_replayed": outcome.steps_executed,
        "differences": (carried.diffs_total or len(carried.diffs)) if carried else None,
        "differences_carried": len(carried.diffs) if carried else None,
        "first_divergent_step": carried.first_divergent_step if carried else None,
        "whole_comparison_bytes": whole_bytes,
        "outcome_payload_bytes": payload.ByteSize(),
        "ingest_s": round(ingested, 2),
        "replay_s": round(replayed, 2),
    }


def main(steps: int = 12_000, *, diverging: bool = True) -> dict[str, Any]:
    r = asyncio.run(replay_through_temporal(steps, diverging=diverging))
    ended = r["status"] == "COMPLETED" and r["verdict"] in ("REPRODUCED", "NOT_REPRODUCED")
    how = f"{r['status']} {r['verdict']}" + ("" if ended else f" ({r['reason']})")
    emit(
        Row(
            figure=(
                f"{r['source_steps']:,}-step ingested run, "
                f"{'diverging' if diverging else 'reproducing'} RECORDED replay through "
                f"Temporal: {how}, {r['differences'] or 0:,} differences "
                f"({r['steps_replayed']:,} steps replayed in {r['replay_s']:.1f} s)"
            ),
            value=f"outcome payload {r['outcome_payload_bytes']:,} B",
            baseline=f"whole comparison (artifact) {r['whole_comparison_bytes']:,} B",
            ratio=r["outcome_payload_bytes"] / max(r["whole_comparison_bytes"], 1),
            goal=f"a verdict; payload < {TEMPORAL_PAYLOAD_LIMIT:,} B (TMPRL1103)",
            met=ended and r["outcome_payload_bytes"] < TEMPORAL_PAYLOAD_LIMIT,
            load=machine_load(),
        )
    )
    return r


if __name__ == "__main__":
    # python -m bench.long_replay [STEPS] [--reproducing]: --reproducing ingests a run whose
    # replay replays every step (its header declares all its model calls)
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    reproducing = "--reproducing" in sys.argv
    result = main(numbers[0] if numbers else 12_000, diverging=not reproducing)
    print(json.dumps(result, indent=2))
