"""``replaybook api [--host] [--port]``: serve the HTTP API (``api``) with uvicorn."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from cli.common import fail, load_settings
from cli.exit_codes import exit_code_for
from models.errors import ReplaybookError

app = typer.Typer()

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

    from api import create_app
    from worker.logs import configure_logging

    settings = load_settings()
    configure_logging(settings.log_format)
    try:
        application = create_app(settings)
    except ReplaybookError as exc:
        fail(f"api: {exc}", exit_code_for(exc))
    uvicorn.run(application, host=host, port=port, log_level="info", access_log=False)
    from worker import temporal_state

    if temporal_state.client_used:
        # skip interpreter teardown, which the Temporal SDK's runtime threads can abort
        # (temporalio/sdk-python#300); uvicorn has shut the application down by now
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
