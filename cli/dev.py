"""``replaybook dev up | status | down``: the local development stack (``devstack.stack``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.common import JsonOption, fail, load_settings, print_json
from cli.exit_codes import exit_code_for
from devstack.ports import DEFAULT_TEMPORAL_PORT, DEFAULT_TEMPORAL_UI_PORT
from models.errors import ReplaybookError

app = typer.Typer()

dev_app = typer.Typer(
    help="The local development stack: Temporal dev server, SeaweedFS (when artifacts are on "
    "s3:// and no endpoint is set), the local model server (unless REPLAYBOOK_LOCAL_MODELS=off), "
    "the Replaybook worker and the HTTP API, in the background.",
    no_args_is_help=True,
)
app.add_typer(dev_app, name="dev")


def _echo_status(status: dict[str, Any]) -> None:
    if not status["components"]:
        typer.echo(f"dev stack: not running (no state in {status['state_path']})")
        return
    typer.echo(f"dev stack: {'up' if status['running'] else 'DEGRADED'}  ({status['home']})")
    for name, c in status["components"].items():
        where = c.get("address") or ""
        if c.get("ui_url"):
            where += f"  UI {c['ui_url']}"
        if c.get("models"):
            where += f"  serving {', '.join(c['models'])}"
        state = "alive" if c["alive"] else ("no answer on port" if c["pid_alive"] else "dead")
        typer.echo(f"  {name:<10} {state:<17} pid {c['pid']!s:<8} {where}".rstrip())
        if c.get("error"):
            typer.echo(f"  {'':<10} {c['error']}")
    if status.get("api_url"):
        typer.echo(
            f"  API {status['api_url']} (OpenAPI at /openapi.json; the admin dev_token is in "
            "`replaybook dev status --json`)"
        )
    if status.get("ui_url"):
        typer.echo(f"  console {status['ui_url']} (log in with a token of the API)")
    if status.get("worker_metrics_port"):
        typer.echo(f"  worker metrics http://127.0.0.1:{status['worker_metrics_port']}/metrics")


@dev_app.command("up")
def dev_up(
    temporal_port: Annotated[
        int,
        typer.Option(
            "--temporal-port",
            envvar="REPLAYBOOK_TEMPORAL_PORT",
            help="Temporal front-end gRPC port.",
        ),
    ] = DEFAULT_TEMPORAL_PORT,
    ui_port: Annotated[
        int,
        typer.Option(
            "--ui-port", envvar="REPLAYBOOK_TEMPORAL_UI_PORT", help="Temporal Web UI port."
        ),
    ] = DEFAULT_TEMPORAL_UI_PORT,
    s3_port: Annotated[
        int | None,
        typer.Option(help="SeaweedFS S3 port, when the stack runs it (default: a free port)."),
    ] = None,
    api_port: Annotated[
        int | None,
        typer.Option(
            "--api-port", envvar="REPLAYBOOK_API_PORT", help="HTTP API port (default: a free port)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Start the stack in the background; on a running stack, restart only what died."""
    from devstack.stack import stack_up

    settings = load_settings()
    try:
        result = stack_up(
            settings.home,
            temporal_port=temporal_port,
            ui_port=ui_port,
            s3_port=s3_port,
            api_port=api_port,
            namespace=settings.temporal.namespace,
            echo=(lambda _: None) if as_json else typer.echo,
        )
    except ReplaybookError as exc:
        fail(f"dev up: {exc}", exit_code_for(exc))
    if as_json:
        print_json({"changed": result.changed, "actions": result.actions} | result.status)
        return
    if not result.changed:
        typer.echo("dev stack already running; nothing to do")
    _echo_status(result.status)


@dev_app.command("status")
def dev_status(as_json: JsonOption = False) -> None:
    """Each component with pid, liveness and address; exit 0 when all are up, 1 otherwise."""
    from devstack.stack import stack_status

    status = stack_status(load_settings().home)
    if as_json:
        print_json(status)
    else:
        _echo_status(status)
    if not status["running"]:
        raise typer.Exit(1)


@dev_app.command("down")
def dev_down(as_json: JsonOption = False) -> None:
    """Stop the workers, then Temporal, then SeaweedFS; a no-op when nothing runs."""
    from devstack.stack import stack_down

    settings = load_settings()
    stopped = stack_down(settings.home, echo=(lambda _: None) if as_json else typer.echo)
    if as_json:
        print_json({"stopped": stopped})
    elif not stopped:
        typer.echo("dev stack not running; nothing to do")
    else:
        typer.echo("dev stack stopped")
