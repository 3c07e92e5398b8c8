"""What every command module shares: running async commands, failing with an exit code, JSON.

Output goes to stdout (``--json`` for machines); diagnostics go to stderr. A user error is one
line naming the field and the rule: a pydantic ``ValidationError`` (a record built from options)
becomes an ``InvalidInputError`` naming the option, an unreachable Temporal a service failure
(exit 4), and anything unexpected (a bug) one line pointing at the traceback kept in
``$REPLAYBOOK_HOME/logs/cli-errors.log`` (exit 5).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from cli.exit_codes import EXIT_BAD_INPUT, EXIT_INTERNAL, exit_code_for
from models.errors import ReplaybookError, StoreError
from worker import temporal_state

if TYPE_CHECKING:
    from pydantic import ValidationError

    from app.capsule_keys import CapsuleKeySettings
    from worker.settings import Settings

T = TypeVar("T")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    typer.echo(f"replaybook: {message}", err=True)
    raise typer.Exit(code)


def cli_settings() -> Settings:
    """The settings of a CLI process (a composition root): its environment and, below it, as a
    development convenience of the CLI only, the embedded stack's addresses that
    ``replaybook dev up`` keeps in ``$REPLAYBOOK_HOME/dev/env`` while a stack is recorded
    there (``ConfigurationError`` for a refused value). Imported here, not at the top: the
    settings import the Temporal SDK, which ``--help`` should not wait for."""
    from devstack.components import dev_env_path
    from runtime.executor import set_default_max_steps
    from runtime.manifests import set_image_digest
    from worker.settings import load_settings as read_settings

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
        import asyncio

        from pydantic import ValidationError

        from worker.logs import configure_logging

        configure_logging(load_settings().log_format)
        try:
            result = asyncio.run(fn(*args, **kwargs))
        except typer.Exit as exc:
            leave_if_temporal_was_used(exc.exit_code)
            raise
        except (ReplaybookError, ValidationError) as exc:
            error = user_error(exc)
            leave_if_temporal_was_used(exit_code_for(error), f"replaybook: {error}")
            fail(str(error), exit_code_for(error))
        except BrokenPipeError:  # the reader left (``| head``): end as the entry point does
            raise
        except (KeyboardInterrupt, typer.Abort):
            leave_if_temporal_was_used(130, "replaybook: interrupted")
            fail("interrupted", 130)
        except Exception as exc:  # a bug: one line for the user, the traceback in a file
            if service := service_error(exc):
                leave_if_temporal_was_used(exit_code_for(service), f"replaybook: {service}")
                fail(str(service), exit_code_for(service))
            message = internal_error(exc)
            leave_if_temporal_was_used(EXIT_INTERNAL, f"replaybook: {message}")
            fail(message, EXIT_INTERNAL)
        leave_if_temporal_was_used(0)
        return result

    return wrapper


def end_on_broken_pipe() -> NoReturn:
    """The reader of stdout went away (``replaybook runs list | head -1``): end quietly with
    exit code 0, as ``git`` and ``gh`` do — the output was not wanted any more, nothing
    failed. stdout is pointed at /dev/null first, so the interpreter's last flush of the
    unwritten rest cannot raise again on the way out."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    leave_if_temporal_was_used(0)
    sys.exit(0)


def stdout_pipe_broke() -> bool:
    """Whether Typer (its own copy of click) already met a broken stdout and ended the
    command with exit code 1: it then wraps the streams in ``PacifyFlushWrapper``, which
    nothing else does (matched by name: the class lives in a private module)."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper"


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


def user_error(exc: ReplaybookError | ValidationError) -> ReplaybookError:
    from pydantic import ValidationError

    from models.validation import invalid_input

    return invalid_input(exc) if isinstance(exc, ValidationError) else exc


def user_errors() -> tuple[type[Exception], ...]:
    """What ``user_error`` turns into one line (pydantic imported only once one is raised)."""
    from pydantic import ValidationError

    return (ReplaybookError, ValidationError)


def service_error(exc: BaseException) -> StoreError | None:
    """A Temporal client that cannot reach its server (the SDK raises a bare ``RuntimeError``
    from ``Client.connect``, an ``RPCError`` UNAVAILABLE later) as the service failure it is."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and text.startswith("Failed client connect"):
        address = re.search(r"\d+\.\d+\.\d+\.\d+:\d+|[\w.-]+:\d+", text)
        where = f" at {address.group(0)}" if address else ""
        return StoreError(
            f"Temporal is not reachable{where} (start the embedded stack with `replaybook dev up`)"
        )
    status = getattr(exc, "status", None)
    if type(exc).__name__ == "RPCError" and getattr(status, "name", "") == "UNAVAILABLE":
        return StoreError(f"Temporal is unavailable: {getattr(exc, 'message', text)}")
    return None


def internal_error(exc: BaseException) -> str:
    """The one line for a bug; its traceback is appended to the CLI's error log when the
    home is writable (the CLI is a composition root: it may read ``REPLAYBOOK_HOME``)."""
    home = Path(os.environ.get("REPLAYBOOK_HOME") or ".replaybook")
    log = home / "logs" / "cli-errors.log"
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out:
            out.write(f"--- {datetime.now(UTC).isoformat()}\n")
            out.write("".join(traceback.format_exception(exc)))
        where = f"; the traceback is in {log}"
    except OSError:
        where = ""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"internal error {type(exc).__name__}: {first}{where}"


#: what a progress poll answers: (what is happening, done, total or None when not known)
Progress = tuple[str, int, int | None]


async def with_progress(
    result: Coroutine[Any, Any, T], poll: Callable[[], Coroutine[Any, Any, Progress]], what: str
) -> T:
    """Await ``result``; on a terminal, meanwhile, a Rich progress bar on stderr fed by
    ``poll`` every half second (stdout, and so ``--json``, stays untouched; off a terminal
    nothing is drawn and ``poll`` is never called)."""
    if not sys.stderr.isatty():
        return await result
    import asyncio

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as Bar

    task = asyncio.ensure_future(result)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn())
    with Bar(
        *columns, MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True)
    ) as bar:
        shown = bar.add_task(what, total=None)
        while not task.done():
            try:
                state, done, total = await poll()
            except Exception:
                state, done, total = "", 0, None
            bar.update(shown, description=f"{what} {state}".strip(), completed=done, total=total)
            await asyncio.wait({task}, timeout=0.5)
    return await task


#: a tool-loop run's candidates (ingested or imported agents), stored as artifacts
SystemPromptFile = Annotated[
    Path | None,
    typer.Option(
        "--system-prompt-file",
        help="A new compiled system prompt for a tool-loop run (ingested/imported agent).",
    ),
]
ToolsFile = Annotated[
    Path | None,
    typer.Option(
        "--tools-file",
        help="A changed tool catalogue for a tool-loop run: a JSON list of tools "
        "(name, description, parameters, side_effect_class).",
    ),
]


def pinned_tools_module(name: str | None) -> Any:
    """``--tools-module NAME`` imported, checked and pinned (``ToolsModulePin``); None."""
    from app.replay_checks import pin_tools_module

    return pin_tools_module(name, "--tools-module") if name else None


ToolsModule = Annotated[
    str | None,
    typer.Option(
        "--tools-module",
        help="The team's read-only tools (pkg.mod[:ATTR] or a replaybook.tools entry point): "
        "with --on-fixture-miss sandbox-live they answer READ misses inside the sandbox "
        "(docs/your-tools.md).",
    ),
]


async def stored_candidates(
    system_prompt_file: Path | None, tools_file: Path | None
) -> dict[str, str]:
    """The candidate files, checked and stored as artifacts: their digests (none given: {})."""
    from app.candidates import read_candidates, store_candidates
    from stores.bundle import open_stores

    texts = read_candidates(system_prompt_file, tools_file)
    if not texts:
        return {}
    async with open_stores(load_settings().stores) as stores:
        return await store_candidates(
            stores.artifacts, system_prompt=texts.get("system_prompt"), tools=texts.get("tools")
        )


def capsule_key_settings(home: Path) -> CapsuleKeySettings:
    """The capsule keys this environment configures (``REPLAYBOOK_CASE_SIGNING_KEY``,
    ``REPLAYBOOK_CASE_PUBLIC_KEY``), beside the home's own."""
    import os

    from app.capsule_keys import PUBLIC_KEY_VARIABLE, SIGNING_KEY_VARIABLE, CapsuleKeySettings

    return CapsuleKeySettings(
        home,
        os.environ.get(SIGNING_KEY_VARIABLE) or None,
        os.environ.get(PUBLIC_KEY_VARIABLE) or None,
    )
