"""The cyclic collector held off during a long comparison (``models.collector``)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from bench.bench_compare import trajectory
from models.collector import collector_paused
from models.comparison import _compare, compare_trajectories


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    started: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        yield started
    finally:
        gc.callbacks.remove(seen)


def test_a_long_diverging_comparison_runs_no_collection(collections: list[int]) -> None:
    source = trajectory(3_000)
    replay = trajectory(3_000, changed_from=1_500, keep=0.95)
    gc.collect()
    collections.clear()
    comparison = compare_trajectories(source, replay)
    # at most the one collection its allocations made due, once the collector is back on
    assert collections in ([], [0])
    assert gc.isenabled()
    assert len(comparison.diffs) > 100  # it built many objects: unpaused, they collect
    with_collector = [compare_trajectories(source, replay) for _ in range(2)]
    assert with_collector[0] == comparison
    # the same work outside compare_trajectories' pause runs collection after collection
    gc.collect()
    collections.clear()
    _compare(source, replay)
    assert len(collections) > 10


def test_the_collectors_state_is_restored_even_when_it_was_off() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the body failed")
    assert gc.isenabled()


def test_overlapping_pauses_in_threads_end_with_the_collector_on() -> None:
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    assert inside.wait(10)
    with collector_paused():  # starts while the other thread's pause holds
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other one still runs: it stays off
    release.set()
    other.join(10)
    assert gc.isenabled()
