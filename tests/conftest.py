"""Shared fixtures. Real services only: PostgreSQL on 127.0.0.1:5432, SeaweedFS and the
Temporal dev server started by the fixtures on free ports."""

import atexit
import contextlib
import faulthandler
import os
import signal
import tempfile
from pathlib import Path

pytest_plugins = [
    "tests.fixtures_db",
    "tests.fixtures_s3",
    "tests.fixtures_temporal",
    "tests.fixtures_replay",
    "tests.fixtures_models",
    "tests.fixtures_import",
]

# the stacks the tests start as processes (`replaybook up`, workers) read the environment: no
# warm sandbox process in each of them either (see tests/fixtures_replay.stack_settings)
os.environ.setdefault("REPLAYBOOK_SANDBOX_WARM", "0")

# `kill -USR1 <pid>` of a pytest process (an xdist worker) writes every thread's stack to
# $TMPDIR/pytest-stacks-<pid>.txt: what a run that waits with an idle CPU is waiting on (a file,
# because pytest captures the process's stderr)
_STACKS = (Path(tempfile.gettempdir()) / f"pytest-stacks-{os.getpid()}.txt").open("a")
faulthandler.register(signal.SIGUSR1, file=_STACKS, all_threads=True)


@atexit.register
def _drop_empty_stacks_file() -> None:
    _STACKS.close()
    with contextlib.suppress(OSError):
        if os.path.getsize(_STACKS.name) == 0:
            os.unlink(_STACKS.name)
