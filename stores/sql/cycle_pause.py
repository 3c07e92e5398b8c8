"""Pausing the cyclic garbage collector while a check builds many short-lived objects.

The full verification of a run (``stores.sql.run_check``) holds, for the length of the check,
a row per event, a parsed payload per record-carrying event and a row per lookup-table entry:
tens of thousands of containers, none in a reference cycle, all freed by reference counting when
the check ends. With the collector running, they survive enough young collections to be
promoted and to start a full collection, which walks the whole heap (~120k objects in a
server, 100–200 ms) for nothing. Paused, nothing is promoted: what the check allocated is freed
before the collector looks again.

The pause is counted (concurrent checks in one loop or in several threads share it): the
collector is enabled again when the last one ends, and never by a pause that found it already
disabled by someone else.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["cycle_collection_paused"]

_lock = threading.Lock()
_pauses = 0


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """The cyclic collector disabled for the body (reference counting still frees)."""
    global _pauses
    with _lock:
        # disabled by someone else and not by a pause of ours: left as it is
        owned = _pauses > 0 or gc.isenabled()
        if owned:
            _pauses += 1
            gc.disable()
    try:
        yield
    finally:
        if owned:
            with _lock:
                _pauses -= 1
                if _pauses == 0:
                    gc.enable()
