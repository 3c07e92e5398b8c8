"""The process's configuration (``replaybook.configure``)."""

from __future__ import annotations

import threading

from replaybook._config import Config

_CONFIG: Config | None = None
_LOCK = threading.Lock()


def config() -> Config:
    global _CONFIG
    with _LOCK:
        if _CONFIG is None:
            _CONFIG = Config.from_env()
        return _CONFIG


def set_config(new: Config) -> None:
    global _CONFIG
    with _LOCK:
        _CONFIG = new
