"""Random ids for what a recording makes at every step (events, tool calls, prompts, context
snapshots), drawn without a system call.

``uuid.uuid4`` reads ``os.urandom``, which gives the GIL up for its ``getrandom`` call. On the
event loop's thread, with the stores' writer threads busy, each of those calls then waited for
the GIL to come back: 40 µs on average, five times a recorded step (issue 35 item 7). These ids
are a keyed BLAKE2b of a counter instead (a pseudorandom function: as unique and as hard to
guess as ``uuid4``'s, without its system call), the key drawn from ``os.urandom`` once per
process and again in a forked child, whose counter would otherwise repeat its parent's.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid

__all__ = ["new_hex", "new_uuid"]


class _Ids:
    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self._key = os.urandom(32)
        self._counter = itertools.count()

    def next(self) -> bytes:
        n = next(self._counter)  # atomic under the GIL: no two threads get the same
        return hashlib.blake2b(n.to_bytes(8, "big"), key=self._key, digest_size=16).digest()


_ids = _Ids()
os.register_at_fork(after_in_child=_ids.reseed)


def new_uuid() -> str:
    """A random (version 4) UUID in its text form, as ``str(uuid.uuid4())``."""
    return str(uuid.UUID(bytes=_ids.next(), version=4))


def new_hex(length: int = 32) -> str:
    """The first ``length`` hex digits of a ``new_uuid`` (``uuid.uuid4().hex[:length]``)."""
    return uuid.UUID(bytes=_ids.next(), version=4).hex[:length]
