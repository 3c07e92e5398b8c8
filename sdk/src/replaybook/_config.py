"""Where the SDK sends and spools: ``configure()`` arguments, else the environment
(``REPLAYBOOK_URL``, ``REPLAYBOOK_TOKEN``, ``REPLAYBOOK_SPOOL_DIR``)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

log = logging.getLogger("replaybook")

#: events sent in one batch at most (and bytes: the server takes at most 8 MiB a request)
MAX_BATCH_EVENTS = 500
MAX_BATCH_BYTES = 1024 * 1024


def default_spool_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "replaybook" / "spool"


@dataclass(frozen=True)
class Config:
    #: the Replaybook API, e.g. ``http://127.0.0.1:8080``; ``None``: spool only (send later
    #: with ``replaybook-sdk flush``)
    url: str | None = None
    token: str | None = None
    spool_dir: Path = Path()
    #: raise recording failures into the agent (for tests); otherwise they are logged
    strict: bool = False
    #: seconds between background sends when fewer than a batch are waiting
    flush_interval: float = 1.0
    max_batch_events: int = MAX_BATCH_EVENTS
    max_batch_bytes: int = MAX_BATCH_BYTES
    #: seconds the process waits at exit for the server to take what is waiting
    exit_timeout: float = 10.0
    #: per request
    http_timeout: float = 10.0
    #: the longest wait between retries while the server is down
    max_backoff: float = 30.0

    @classmethod
    def from_env(cls) -> Config:
        spool = os.environ.get("REPLAYBOOK_SPOOL_DIR")
        return cls(
            url=os.environ.get("REPLAYBOOK_URL") or None,
            token=os.environ.get("REPLAYBOOK_TOKEN") or None,
            spool_dir=Path(spool) if spool else default_spool_dir(),
            strict=os.environ.get("REPLAYBOOK_STRICT", "").lower() in ("1", "true", "yes"),
        )

    def updated(self, **changes: object) -> Config:
        given = {k: v for k, v in changes.items() if v is not None}
        if "spool_dir" in given:
            given["spool_dir"] = Path(str(given["spool_dir"]))
        return replace(self, **given)  # type: ignore[arg-type]


class RecordingError(RuntimeError):
    """Recording failed; raised into the agent only with ``strict=True``."""


def report(config: Config, message: str, exc: BaseException | None = None) -> None:
    """A recording failure: raised in strict mode, else logged (the agent goes on)."""
    if config.strict:
        raise RecordingError(message) from exc
    log.warning("replaybook: %s%s", message, f": {exc}" if exc else "")
