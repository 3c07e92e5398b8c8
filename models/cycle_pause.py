"""Pausing the cyclic garbage collector while a computation builds many objects.

Two users, each holding tens of thousands of containers for its length, none in a reference
cycle, all freed by reference counting when it ends:

- the full verification of a run (``stores.sql.run_check``): a row per event, a parsed payload
  per record-carrying event and a row per lookup-table entry;
- the comparison of a replay with its source (``models.comparison.compare_trajectories``):
  its diffs, their texts and the alignment's tables, in a process that also holds the two
  trajectories (a 10,000-step diverging comparison took 57 ms or 105 ms, every other call).

With the collector running, those objects survive enough young collections to be promoted and
to start a full collection, which walks the whole heap (~120k objects in a server, 45-200 ms)
for nothing. Paused, nothing is promoted: the collection their allocations made due runs once,
at the next allocation after the pause.

The pause is counted (concurrent pauses in one loop or in several threads share it): the
collector is enabled again when the last one ends, and never by a pause that found it already
disabled by someone else. Pure (``gc`` and a lock): ``models`` holds it so both can use it.
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
