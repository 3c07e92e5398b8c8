"""How replay steps are isolated: the settings, read from the environment.

``REPLAYBOOK_SANDBOX`` is ``bubblewrap`` (the default) or ``off``; ``off`` is a development
flag (``python -m worker --unsandboxed`` sets it) and is recorded in every step the worker
runs as the isolation ``none (dev flag)``. Limits are per sandboxed process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from models.errors import ConfigurationError
from runtime.env_values import positive_int

BUBBLEWRAP = "bubblewrap"
NO_ISOLATION = "none (dev flag)"
_MODES = {"bubblewrap": BUBBLEWRAP, "on": BUBBLEWRAP, "off": NO_ISOLATION}


@dataclass(frozen=True)
class SandboxSettings:
    #: ``bubblewrap`` or ``none (dev flag)`` (the label recorded in replays)
    isolation: str = BUBBLEWRAP
    bwrap: str = "bwrap"
    cpu_seconds: int = 60
    address_space_bytes: int = 2 * 1024**3
    file_size_bytes: int = 64 * 1024**2
    max_processes: int = 64
    #: size of the private /tmp (a tmpfs, the only writable place)
    tmp_bytes: int = 256 * 1024**2
    #: when the worker runs as root, sandboxed code runs as an unprivileged uid/gid from
    #: ``uid`` up, one per concurrent sandbox: RLIMIT_NPROC counts a uid's processes host-wide
    #: and never limits root, so each sandbox needs a uid of its own for the limit to be its own
    uid: int = 200000
    #: a sandboxed step that has not finished after this many seconds (wall clock) is killed
    wall_seconds: float = 600.0
    #: a replay's sandboxed process is kept for its next batch this long (see runner)
    idle_seconds: float = 30.0
    #: batches one sandboxed process may run before it is replaced (1: a fresh one each)
    jobs_per_process: int = 1000

    @property
    def enabled(self) -> bool:
        return self.isolation == BUBBLEWRAP

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SandboxSettings:
        env = os.environ if env is None else env
        mode = (env.get("REPLAYBOOK_SANDBOX") or "bubblewrap").strip().lower()
        if mode not in _MODES:
            raise ConfigurationError(f"REPLAYBOOK_SANDBOX must be bubblewrap or off, not {mode!r}")

        def number(name: str, default: int) -> int:
            return positive_int(env, name, default)

        return cls(
            isolation=_MODES[mode],
            bwrap=env.get("REPLAYBOOK_BWRAP") or "bwrap",
            cpu_seconds=number("REPLAYBOOK_SANDBOX_CPU_SECONDS", cls.cpu_seconds),
            address_space_bytes=number("REPLAYBOOK_SANDBOX_MEMORY_BYTES", cls.address_space_bytes),
            file_size_bytes=number("REPLAYBOOK_SANDBOX_FILE_SIZE_BYTES", cls.file_size_bytes),
            max_processes=number("REPLAYBOOK_SANDBOX_MAX_PROCESSES", cls.max_processes),
            tmp_bytes=number("REPLAYBOOK_SANDBOX_TMP_BYTES", cls.tmp_bytes),
            uid=number("REPLAYBOOK_SANDBOX_UID", cls.uid),
            idle_seconds=number("REPLAYBOOK_SANDBOX_IDLE_SECONDS", int(cls.idle_seconds)),
            jobs_per_process=number("REPLAYBOOK_SANDBOX_JOBS_PER_PROCESS", cls.jobs_per_process),
        )
