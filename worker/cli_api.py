"""``replaybook api [--host] [--port]``: serve the HTTP API (``worker.api``) with uvicorn."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from models.errors import ReplaybookError
from worker.cli import _exit_code, app, fail
from worker.settings import Settings

DEFAULT_PORT = 8080


@app.command("api")
def api_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(envvar="REPLAYBOOK_API_PORT", help="TCP port to listen on.")
    ] = DEFAULT_PORT,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, Prometheus metrics at /metrics).

    Needs REPLAYBOOK_API_TOKENS or REPLAYBOOK_API_TOKENS_FILE (or REPLAYBOOK_API_INSECURE_DEV=1).
    """
    import uvicorn

    from worker.api import create_app
    from worker.logs import configure_logging

    settings = Settings.from_env()
    configure_logging(settings.log_format)
    try:
        application = create_app(settings)
    except ReplaybookError as exc:
        fail(f"api: {exc}", _exit_code(exc))
    uvicorn.run(application, host=host, port=port, log_level="info", access_log=False)
    from worker import temporal_state

    if temporal_state.client_used:
        # skip interpreter teardown, which the Temporal SDK's runtime threads can abort
        # (temporalio/sdk-python#300); uvicorn has shut the application down by now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
