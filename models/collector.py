"""The cyclic garbage collector held off while a pure computation builds many objects.

A long comparison creates thousands of objects that stay alive until it returns (diffs, their
texts, the alignment's tables). Each of CPython's full collections walks the whole heap, and a
process holding two 10,000-step trajectories has hundreds of thousands of objects in it: a
collection triggered by the comparison's own survivors took 45 ms, and about every other
10,000-step diverging comparison paid it (57 ms or 105 ms, never in between). Nothing these
computations build is cyclic garbage (reference counting frees their temporaries), so a
collection during them finds nothing to free.

Paused calls may overlap (threads): the first one in records whether the collector was on and
the last one out restores that. A collection the process is due runs at its next allocation
after that; nothing is lost, only moved out of the computation.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the body with the cyclic collector off (see the module docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
