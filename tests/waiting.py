"""Waiting on a condition in a test: polled, with a deadline that fails the test by name."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(predicate: Callable[[], bool], seconds: float) -> None:
    """Return once ``predicate()`` holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)
