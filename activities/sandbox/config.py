"""How replay steps are isolated: the settings section (``Settings.sandbox``), each field read
from the variable its alias names by the composition root.

``REPLAYBOOK_SANDBOX`` is ``bubblewrap`` (the default) or ``off``; ``off`` is a development
flag (``python -m worker --unsandboxed`` sets it) and is recorded in every step the worker
runs as the isolation ``none (dev flag)``. Limits are per sandboxed process.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from runtime.env_values import PositiveInt, WholeSeconds

BUBBLEWRAP = "bubblewrap"
NO_ISOLATION = "none (dev flag)"
_MODES = {"bubblewrap": BUBBLEWRAP, "on": BUBBLEWRAP, "off": NO_ISOLATION}


def _isolation(value: Any) -> str:
    if value in (BUBBLEWRAP, NO_ISOLATION):
        return str(value)
    mode = str(value).strip().lower()
    if mode not in _MODES:
        raise ValueError("must be bubblewrap or off")
    return _MODES[mode]


class SandboxSettings(BaseModel):
    model_config = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)

    #: ``bubblewrap`` or ``none (dev flag)`` (the label recorded in replays)
    isolation: Annotated[str, BeforeValidator(_isolation)] = Field(
        BUBBLEWRAP, validation_alias="REPLAYBOOK_SANDBOX"
    )
    bwrap: str = Field("bwrap", validation_alias="REPLAYBOOK_BWRAP")
    cpu_seconds: PositiveInt = Field(60, validation_alias="REPLAYBOOK_SANDBOX_CPU_SECONDS")
    address_space_bytes: PositiveInt = Field(
        2 * 1024**3, validation_alias="REPLAYBOOK_SANDBOX_MEMORY_BYTES"
    )
    file_size_bytes: PositiveInt = Field(
        64 * 1024**2, validation_alias="REPLAYBOOK_SANDBOX_FILE_SIZE_BYTES"
    )
    max_processes: PositiveInt = Field(64, validation_alias="REPLAYBOOK_SANDBOX_MAX_PROCESSES")
    #: size of the private /tmp (a tmpfs, the only writable place)
    tmp_bytes: PositiveInt = Field(256 * 1024**2, validation_alias="REPLAYBOOK_SANDBOX_TMP_BYTES")
    #: when the worker runs as root, sandboxed code runs as an unprivileged uid/gid from
    #: ``uid`` up, one per concurrent sandbox: RLIMIT_NPROC counts a uid's processes host-wide
    #: and never limits root, so each sandbox needs a uid of its own for the limit to be its own
    uid: PositiveInt = Field(200000, validation_alias="REPLAYBOOK_SANDBOX_UID")
    #: a sandboxed step that has not finished after this many seconds (wall clock) is killed;
    #: a step's live model call may take that long less 30 s (``REPLAYBOOK_MODELS_TIMEOUT``):
    #: one answer of a small local model took 8 minutes on two cores at a load average of 12
    wall_seconds: float = 900.0
    #: a sandboxed process that has not reported ready this many seconds after its spawn is
    #: killed and the step's activity fails with ``SandboxStartTimeoutError`` (~0.6-0.8 s
    #: here when idle; generous for a loaded machine)
    start_seconds: WholeSeconds = Field(60.0, validation_alias="REPLAYBOOK_SANDBOX_START_SECONDS")
    #: a replay's sandboxed process is kept for its next batch this long (see runner)
    idle_seconds: WholeSeconds = Field(30.0, validation_alias="REPLAYBOOK_SANDBOX_IDLE_SECONDS")
    #: batches one sandboxed process may run before it is replaced (1: a fresh one each)
    jobs_per_process: PositiveInt = Field(
        1000, validation_alias="REPLAYBOOK_SANDBOX_JOBS_PER_PROCESS"
    )
    #: sandbox processes kept started and idle, so that a replay's first batch (a child
    #: replay of ``--repeat``) takes one instead of waiting for a sandbox to start (~0.6-0.8 s
    #: here, ~65 MB each); each is started exactly as any other (same isolation, same limits)
    #: and serves one replay (or the repetitions of one plan in a fan-out, ``fanout_share``).
    #: A replay worker starts them when it starts.
    warm_processes: int = Field(1, ge=0, le=64, validation_alias="REPLAYBOOK_SANDBOX_WARM")
    #: at most this many warm processes while a fan-out (an incident's replays, a
    #: ``--repeat`` parent) has announced child replays still to come: the pool grows to one
    #: started process per announced child, ahead of their first batches (0: never grows)
    fanout_warm: int = Field(32, ge=0, le=256, validation_alias="REPLAYBOOK_SANDBOX_FANOUT_WARM")
    #: the sibling replays of one announced fan-out (same parent, same source run) take turns
    #: in at most this many processes of their own, one batch at a time each, instead of one
    #: process per replay: each start is ~0.5 s of CPU, and twenty of them at once on two
    #: cores took seconds (``siblings``; the trade in docs/sandbox.md). 0: a process per
    #: replay, as before
    fanout_share: int = Field(2, ge=0, le=64, validation_alias="REPLAYBOOK_SANDBOX_FANOUT_SHARE")

    #: bytes one batch of a replay's steps may write through its broker, events and
    #: artifacts together (counted by the worker); past it the replay stops with a partial
    #: result. Per batch, so a runaway step is stopped here however long the replay is
    max_write_bytes: PositiveInt = Field(
        64 * 1024**2, validation_alias="REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES"
    )
    #: the replay's whole total (carried between batches by the workflow) may reach
    #: ``max_write_bytes`` plus this much per step completed: a RECORDED replay's evidence is
    #: ~7 KB a step (a 10,000-step replay wrote 67 MB, over a fixed 64 MiB per replay)
    max_write_bytes_per_step: PositiveInt = Field(
        256 * 1024, validation_alias="REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES_PER_STEP"
    )
    #: broker calls one batch may make (a legitimate step makes a handful)
    max_calls_per_batch: PositiveInt = Field(
        20_000, validation_alias="REPLAYBOOK_SANDBOX_MAX_CALLS_PER_BATCH"
    )
    #: size of one message from the sandboxed process (a step's batch of events, one artifact)
    max_message_bytes: PositiveInt = Field(
        32 * 1024**2, validation_alias="REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES"
    )

    @property
    def enabled(self) -> bool:
        return self.isolation == BUBBLEWRAP
