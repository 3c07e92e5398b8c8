"""The repetitions of one replay share sandbox processes (``activities.sandbox.siblings``):
what one sibling's replayed code leaves on disk or running is gone before the next sibling's
batch, while what it leaves in the process's memory is not — the trade docs/sandbox.md states
(siblings run the same recorded code under the same plan). Each sibling's evidence is its own
replay run, which verifies."""

from __future__ import annotations

import ast
import json
import uuid

from examples.coding_agent import record_coding_run
from models import ExecutionEventType, ReplayMode
from models.replay_flow import ReplayPlan

#: recorded code run inline in each sibling: what it finds of the siblings before it, and
#: what it leaves behind (a file in /tmp, processes of its own and one reparented to the
#: sandbox's init, a mark in the interpreter's memory)
SIBLING = """
import builtins, os, subprocess, sys
found = sorted(n for n in os.listdir("/tmp") if n.startswith("sibling-"))
for pid in (p for p in os.listdir("/proc") if p.isdigit()):
    try:
        if b"time.sleep(600)" in open("/proc/%s/cmdline" % pid, "rb").read():
            found.append("process %s" % pid)
    except OSError:
        pass
before = getattr(builtins, "_siblings_before", 0)
builtins._siblings_before = before + 1
open("/tmp/sibling-%d" % before, "w").write("left behind")
for _ in range(8):  # its own children, SIGKILLed and reaped by the tidy
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
# and one whose parent is gone: reparented to the sandbox's init, not ours to reap
subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])"]).wait()
raise RuntimeError(repr((found, before)))
"""


async def test_siblings_find_no_file_of_each_other_and_their_evidence_verifies(
    replay_stack,
) -> None:
    stack = replay_stack
    source = await record_coding_run(
        stack.stores.ledger, stack.stores.artifacts, SIBLING, runner="inline"
    )
    outcome = await stack.replay(
        ReplayPlan(
            replay_id=f"replay-siblings-{uuid.uuid4().hex[:8]}",
            source_run_id=source.run_id,
            mode=ReplayMode.RECORDED,
            repeat=4,
        )
    )
    assert len(outcome.children) == 4
    seen = []
    for child in outcome.children:
        events = await stack.stores.ledger.events_with_payloads(child)
        (output,) = [
            json.loads(data or b"{}")["output"]
            for event, data in events
            if event.type is ExecutionEventType.STEP_COMPLETED
        ]
        found, before = ast.literal_eval(output["error"].removeprefix("RuntimeError: "))
        # no sibling finds a file or a process another one left: the sandbox's /tmp is
        # emptied and its other processes killed between batches
        assert found == [], (child, found)
        seen.append(before)
        assert (await stack.stores.ledger.verify(child)).intact
    # four siblings in at most two processes: a later one saw an earlier one's mark in
    # memory (the stated trade), so they did share
    assert max(seen) >= 1, seen
