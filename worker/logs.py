"""structlog set-up: JSON lines when stderr is not a terminal, a readable console otherwise."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from structlog.typing import EventDict, WrappedLogger


def add_temporal_context(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """Inside an activity, name the workflow (replay or incident id: they are the workflow
    ids) and the activity, so every line of a replay's or an incident's work can be found."""
    # not imported here: a process that never loaded temporalio is in no activity, and a
    # command line that only prints help should not pay for importing it
    activity = sys.modules.get("temporalio.activity")
    if activity is not None and activity.in_activity():
        info = activity.info()
        event_dict.setdefault("workflow_id", info.workflow_id)
        event_dict.setdefault("activity", info.activity_type)
        if info.attempt > 1:
            event_dict.setdefault("attempt", info.attempt)
    return event_dict


class _CurrentStderr:
    """``sys.stderr`` as it is at each write, not as it was when logging was configured: a
    stream swapped in and closed later (a test runner's capture, an embedding application)
    must not take every later log line down with it."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(fmt: str = "auto", level: int = logging.INFO) -> None:
    """``fmt`` is ``json``, ``console`` or ``auto`` (console on a terminal). Logs go to stderr
    so that command output on stdout stays machine-readable. structlog is imported here, not
    at the top: the command line configures it the moment something imports it
    (``cli.main``), which must not import this module half-way."""
    import structlog

    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            add_temporal_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
