"""``replaybook api [--host] [--port]``: serve the HTTP API — the same process as
``python -m api``, which this command becomes (the CLI and the API share no code; the API's
composition root reads its own settings)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

app = typer.Typer()

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


@app.command("api")
def api_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option(envvar="REPLAYBOOK_API_PORT", help="TCP port to listen on.")
    ] = DEFAULT_PORT,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, Prometheus metrics at /metrics).

    Needs REPLAYBOOK_API_TOKENS or REPLAYBOOK_API_TOKENS_FILE (or REPLAYBOOK_API_INSECURE_DEV=1).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    command = [sys.executable, "-m", "api", "--host", host, "--port", str(port)]
    os.execv(sys.executable, command)
