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
from devstack.components import dev_env_path
from models.errors import ReplaybookError
from runtime.executor import set_default_max_steps
from runtime.manifests import set_image_digest
from worker import temporal_state
from worker.logs import configure_logging
from worker.settings import Settings
from worker.settings import load_settings as read_settings

T = TypeVar("T")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"replaybook: {message}", err=True)
    raise typer.Exit(code)


def cli_settings() -> Settings:
    """The settings of a CLI process (a composition root): its environment and, below it, as a
    development convenience of the CLI only, the embedded stack's addresses that
    ``replaybook dev up`` keeps in ``$REPLAYBOOK_HOME/dev/env`` while a stack is recorded
    there (``ConfigurationError`` for a refused value)."""
    settings = read_settings()
    dev_env = dev_env_path(settings.home)
    if dev_env.is_file():
        settings = read_settings(env_file=dev_env)
    set_image_digest(settings.image_digest)
    set_default_max_steps(settings.max_steps)
    return settings


def load_settings() -> Settings:
    """``cli_settings()`` for a command: a refused value ends it with its one-line error (exit
    code 2)."""
    try:
        return cli_settings()
    except ReplaybookError as exc:
        fail(str(exc), exit_code_for(exc))


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
