"""``freeze_startup_heap``: what start-up built is frozen (out of every later collection),
and start-up's garbage is collected first rather than frozen with it."""

from __future__ import annotations

import gc
import weakref

from worker.heap import freeze_startup_heap


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_startup_objects_are_frozen_and_startup_garbage_is_not() -> None:
    kept = [_Cycle() for _ in range(100)]
    garbage = weakref.ref(_Cycle())  # unreachable: only a collection frees a cycle
    before = gc.get_freeze_count()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() >= before + len(kept)
        assert garbage() is None
    finally:
        gc.unfreeze()
