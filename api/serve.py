"""Serve the HTTP API with uvicorn: what ``replaybook api`` and ``python -m api`` run."""

from __future__ import annotations

import os
import sys

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def serve(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Build the application from the environment's settings and serve it until stopped.
    A configuration problem raises the ``ReplaybookError`` that names it, before listening."""
    import uvicorn

    from api.app import create_app
    from worker import temporal_state
    from worker.heap import freeze_startup_heap
    from worker.logs import configure_logging
    from worker.settings import load_settings

    settings = load_settings()
    configure_logging(settings.log_format)
    application = create_app(settings)
    freeze_startup_heap()
    uvicorn.run(application, host=host, port=port, log_level="info", access_log=False)
    if temporal_state.client_used:
        # skip interpreter teardown, which the Temporal SDK's runtime threads can abort
        # (temporalio/sdk-python#300); uvicorn has shut the application down by now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
