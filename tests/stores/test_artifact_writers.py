"""The artifact writer threads: a write is forgotten before whoever waits for it wakes, so a
put of the same bytes right after (the copy corrupted since) starts a write of its own."""

from __future__ import annotations

import threading
import uuid

from stores.artifacts.writers import write_soon, writing


def test_a_finished_write_is_forgotten_before_its_waiters_wake() -> None:
    key = f"test/{uuid.uuid4().hex}"
    seen: list[object] = []
    done = threading.Event()
    future = write_soon(key, lambda: "sha256:written")

    def woke(_: object) -> None:  # runs where the result is set: the writer thread
        seen.append(writing(key))
        done.set()

    future.add_done_callback(woke)
    assert done.wait(30) and future.result() == "sha256:written"
    assert seen == [None]
    # a new submission of the key is a new write, not the finished one
    again = write_soon(key, lambda: "sha256:again")
    assert again is not future and again.result(30) == "sha256:again"


def test_a_failed_write_is_forgotten_too() -> None:
    key = f"test/{uuid.uuid4().hex}"

    def fail() -> str:
        raise OSError("disk full")

    future = write_soon(key, fail)
    assert isinstance(future.exception(30), OSError)
    assert writing(key) is None
