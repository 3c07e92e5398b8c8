"""The ``replaybook`` command line, assembled from one module per command group.

Exit codes are public and listed in ``cli.exit_codes``. Each group module owns a ``typer.Typer``
named ``app`` holding its commands; this module merges them into the root application, so no
group imports another and nothing imports this module but the console entry point.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import typer

from cli import (
    agent,
    anchors,
    api_server,
    case,
    demo,
    dev,
    evidence,
    forensics,
    importing,
    incident,
    model_registry,
    privacy,
    replay,
    runs,
    sandbox,
    slo,
)
from cli.common import (
    end_on_broken_pipe,
    internal_error,
    stdout_pipe_broke,
    user_error,
    user_errors,
)
from cli.exit_codes import EXIT_INTERNAL, exit_code_for


class ReplaybookApp(typer.Typer):
    """The root application: an error that escapes a command outside ``run_async`` (the
    synchronous commands) still ends in one line and its exit code, never a traceback; a
    broken pipe on stdout (``| head``), for every command, ends quietly with exit code 0."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # logs go to stderr from the first line on (structlog's default is stdout), readable on
        # a terminal, JSON otherwise or when REPLAYBOOK_LOG_FORMAT=json; commands that load the
        # settings configure it again from them
        if not {"--help", "-h"} & set(sys.argv[1:]) and len(sys.argv) > 1:
            _configure_logs_when_structlog_loads()
        try:
            return super().__call__(*args, **kwargs)
        except SystemExit:  # --help and every normal end: nothing to translate
            if stdout_pipe_broke():  # click ended a synchronous command on EPIPE with 1
                end_on_broken_pipe()
            raise
        except BrokenPipeError:  # ``| head``: the reader left; that is no failure
            end_on_broken_pipe()
        except user_errors() as exc:  # evaluated only once something is raised
            error = user_error(exc)  # type: ignore[arg-type]
            typer.echo(f"replaybook: {error}", err=True)
            sys.exit(exit_code_for(error))
        except Exception as exc:  # a bug: one line, the traceback in the CLI's error log
            typer.echo(f"replaybook: {internal_error(exc)}", err=True)
            sys.exit(EXIT_INTERNAL)


class _LogsOnImport(importlib.abc.MetaPathFinder):
    """Configures structlog the moment something imports it: logging is set up before the
    first line is logged, and a command that logs nothing (``canonical``) never pays for
    importing structlog."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "structlog":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec else None
        if spec is None or not isinstance(loader, importlib.abc.Loader):
            return spec
        exec_module = loader.exec_module

        def exec_then_configure(module: ModuleType) -> None:
            exec_module(module)
            _configure_logs()

        loader.exec_module = exec_then_configure  # type: ignore[method-assign]
        return spec


def _configure_logs() -> None:
    from worker.logs import configure_logging

    fmt = os.environ.get("REPLAYBOOK_LOG_FORMAT", "auto")
    configure_logging(fmt if fmt in ("json", "console", "auto") else "auto")


def _configure_logs_when_structlog_loads() -> None:
    if "structlog" in sys.modules:
        _configure_logs()
    elif not any(isinstance(f, _LogsOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _LogsOnImport())


app = ReplaybookApp(
    name="replaybook",
    help="Record, verify and replay LLM agent runs as tamper-evident evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for group in (
    runs,
    anchors,
    demo,
    agent,
    importing,
    replay,
    incident,
    evidence,
    privacy,
    forensics,
    sandbox,
    slo,
    model_registry,
    case,
    dev,
    api_server,
):
    app.add_typer(group.app)


def main() -> None:  # pragma: no cover - console entry point
    app()
