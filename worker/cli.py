"""The ``replaybook`` command line.

Exit codes: 0 success; 1 verification found a broken chain or corrupted evidence; 2 bad input
(including an unknown run id); 3 reconciliation required; 4 a store or service failed.
Output goes to stdout (``--json`` for machines); diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from models.errors import (
    ActionRefusedError,
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    ReconciliationRequiredError,
    ReplaybookError,
    SideEffectError,
)
from worker.logs import configure_logging
from worker.settings import Settings

app = typer.Typer(
    name="replaybook",
    help="Record, verify and replay LLM agent runs as tamper-evident evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
runs_app = typer.Typer(
    help="Recorded runs: list, show, verify the hash chain.", no_args_is_help=True
)
app.add_typer(runs_app, name="runs")

T = TypeVar("T")

EXIT_BROKEN, EXIT_BAD_INPUT, EXIT_RECONCILE, EXIT_STORE = 1, 2, 3, 4
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"replaybook: {message}", err=True)
    raise typer.Exit(code)


def _exit_code(exc: ReplaybookError) -> int:
    if isinstance(exc, ReconciliationRequiredError):
        return EXIT_RECONCILE
    if isinstance(
        exc,
        InvalidInputError | NotFoundError | ConflictError | SideEffectError | ActionRefusedError,
    ):
        return EXIT_BAD_INPUT
    if isinstance(exc, IntegrityError):
        return EXIT_BROKEN
    return EXIT_STORE


def run_async(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async command; Replaybook errors become a message and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        configure_logging(Settings.from_env().log_format)
        try:
            result = asyncio.run(fn(*args, **kwargs))
        except ReplaybookError as exc:
            _leave_if_temporal_was_used(_exit_code(exc), f"replaybook: {exc}")
            fail(str(exc), _exit_code(exc))
        except typer.Exit as exc:
            _leave_if_temporal_was_used(exc.exit_code)
            raise
        _leave_if_temporal_was_used(0)
        return result

    return wrapper


def _leave_if_temporal_was_used(code: int, message: str | None = None) -> None:
    """A process that used a Temporal client exits without interpreter teardown: the SDK's
    Rust runtime threads can outlive the event loop and abort CPython's finalization
    (temporalio/sdk-python#300). Output is flushed first; stores are closed by then."""
    from worker import temporal_state

    if not temporal_state.client_used:
        return
    if message:
        typer.echo(message, err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


# canonical ------------------------------------------------------------------------------------


@app.command()
def canonical(
    path: Annotated[str, typer.Argument(help="JSON file, or - for standard input.")] = "-",
    hash_: Annotated[
        bool, typer.Option("--hash", help="Print the sha256: digest instead.")
    ] = False,
) -> None:
    """Write the RFC 8785 canonical form of a JSON document (strings NFC-normalised)."""
    from models.canonical import canonicalize_text
    from models.digest import sha256_digest

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"canonical: cannot read {path}: {exc.strerror}")
    try:
        out = canonicalize_text(data)
    except InvalidInputError as exc:
        fail(f"canonical: {exc}")
    if hash_:
        sys.stdout.write(sha256_digest(out) + "\n")
    else:
        sys.stdout.buffer.write(out)
    sys.stdout.flush()


# runs -----------------------------------------------------------------------------------------


@runs_app.command("list")
@run_async
async def runs_list(as_json: JsonOption = False) -> None:
    """List recorded runs, newest first."""
    from worker.run_views import list_runs_view
    from worker.stores import open_stores

    async with open_stores(Settings.from_env()) as stores:
        rows = await list_runs_view(stores)
    if as_json:
        print_json({"runs": rows})
        return
    if not rows:
        typer.echo("no runs recorded")
    for row in rows:
        typer.echo(
            f"{row['run_id']}  {row['graph_id']}@{row['graph_version']}  {row['status']:<9}"
            f"  {row['event_count']:>6} events  {row['created_at']}"
        )


@runs_app.command("show")
@run_async
async def runs_show(run_id: str, as_json: JsonOption = False) -> None:
    """Show a run: its header, pinned versions and events."""
    from worker.run_views import describe_run
    from worker.stores import open_stores

    async with open_stores(Settings.from_env()) as stores:
        view = await describe_run(stores, run_id)
    if as_json:
        print_json(view)
        return
    typer.echo(
        f"run {view['run_id']}  {view['graph_id']}@{view['graph_version']}  {view['status']}"
    )
    for name, value in view["pinned"].items():
        if value is not None:
            typer.echo(f"  {name}: {value}")
    typer.echo(f"  events: {view['event_count']}  head: {view['head_hash']}")
    for event in view["events"]:
        typer.echo(
            f"  #{event['sequence']:<5} {event['type']:<17} step={event['step_id']}"
            f"  {event['logical_time']}  {event['payload_hash'][:19]}…"
        )


@runs_app.command("verify")
@run_async
async def runs_verify(run_id: str, as_json: JsonOption = False) -> None:
    """Verify a run's hash chain: exit 0 when intact, 1 naming the first broken sequence."""
    from worker.stores import open_stores

    async with open_stores(Settings.from_env()) as stores:
        result = await stores.ledger.verify(run_id)
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        typer.echo(result.summary())
    if not result.intact:
        raise typer.Exit(EXIT_BROKEN)


# demo -----------------------------------------------------------------------------------------


@app.command()
@run_async
async def demo(
    sample_only: Annotated[
        bool,
        typer.Option("--sample-only", help="Only record and verify one sample run (no Temporal)."),
    ] = False,
) -> None:
    """The end-to-end demo on the embedded stack (what ``make demo`` runs): reference runs,
    two incidents with replays and counterfactuals, confirmation, regression gate, reports."""
    if sample_only:
        from worker.demo import run_demo

        await run_demo(Settings.from_env(), echo=typer.echo)
        return
    from worker.demo_incidents import run_incident_demo

    await run_incident_demo(Settings.from_env(), echo=typer.echo)


def main() -> None:  # pragma: no cover - console entry point
    app()


# commands defined in other modules register themselves on ``app``
from worker import (  # noqa: E402, F401  # noqa: E402, F401
    cli_agent,
    cli_api,
    cli_dev,
    cli_evidence,
    cli_forensics,
    cli_import,
    cli_incident,
    cli_privacy,
    cli_replay,
    cli_sandbox,
    cli_slo,
)
