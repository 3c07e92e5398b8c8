"""``replaybook sandbox check``: what a sandboxed replay step can and cannot do, measured.

Exit codes: 0 every probe as required; 1 a probe found the sandbox too open; 2 the sandbox is
switched off (development flag); 4 bubblewrap cannot create the sandbox.
"""

from __future__ import annotations

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN
from models.errors import ConfigurationError

app = typer.Typer()

sandbox_app = typer.Typer(
    help="The sandbox replay steps run in (isolation: docs/sandbox.md).",
    no_args_is_help=True,
)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("check")
@run_async
async def sandbox_check(as_json: JsonOption = False) -> None:
    """Run probes inside a sandbox like a replay step's: network, credentials, read-only root,
    writable /tmp, CPU, memory, processes, file size."""
    from activities.sandbox.check import host_secret_paths, run_check

    settings = load_settings()
    if not settings.sandbox.enabled:
        raise ConfigurationError(
            "REPLAYBOOK_SANDBOX=off: replay steps run unsandboxed (development flag), "
            "there is no sandbox to check"
        )
    secrets = host_secret_paths(
        settings.home, settings.stores.database_url, settings.stores.artifacts_location
    )
    report = await run_check(settings.sandbox, secrets)
    if as_json:
        print_json(report)
    else:
        for key, value in report.items():
            if key != "details":
                typer.echo(f"{key:20} {value}")
    if not report["ok"]:
        raise typer.Exit(EXIT_BROKEN)
