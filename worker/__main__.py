"""``python -m worker [--queue control|replay|all]``: run Replaybook's Temporal workers."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from worker.logs import configure_logging
from worker.settings import Settings
from worker.temporal import run_workers


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    parser.add_argument("--queue", choices=("control", "replay", "all"), default="all")
    args = parser.parse_args()
    settings = Settings.from_env()
    configure_logging(settings.log_format)

    async def serve() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)  # type: ignore[union-attr]
        try:
            await run_workers(settings, args.queue)
        except asyncio.CancelledError:
            pass

    asyncio.run(serve())
    # skip interpreter teardown, which the Temporal SDK's runtime threads can abort
    # (temporalio/sdk-python#300); the workers have shut down cleanly by now
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
