"""What every command module shares: running async commands, failing with an exit code, JSON.

Output goes to stdout (``--json`` for machines); diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from cli.exit_codes import EXIT_BAD_INPUT, exit_code_for
from models.errors import ReplaybookError
from worker import temporal_state
from worker.logs import configure_logging
from worker.settings import Settings
from worker.settings import load_settings as read_settings

T = TypeVar("T")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"replaybook: {message}", err=True)
    raise typer.Exit(code)


def load_settings() -> Settings:
    """The process's settings, read from the environment once (the CLI is a composition root)."""
    return read_settings()


def run_async(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async command; Replaybook errors become a message and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        configure_logging(load_settings().log_format)
        try:
            result = asyncio.run(fn(*args, **kwargs))
        except ReplaybookError as exc:
            leave_if_temporal_was_used(exit_code_for(exc), f"replaybook: {exc}")
            fail(str(exc), exit_code_for(exc))
        except typer.Exit as exc:
            leave_if_temporal_was_used(exc.exit_code)
            raise
        leave_if_temporal_was_used(0)
        return result

    return wrapper


def leave_if_temporal_was_used(code: int, message: str | None = None) -> None:
    """A process that used a Temporal client exits without interpreter teardown: the SDK's
    Rust runtime threads can outlive the event loop and abort CPython's finalization
    (temporalio/sdk-python#300). Output is flushed first; stores are closed by then."""
    if not temporal_state.client_used:
        return
    if message:
        typer.echo(message, err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
