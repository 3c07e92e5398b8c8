"""The pause of the cyclic collector (the full check's and the comparison's): counted, never
enabling a collector that someone else disabled, and what it saves a long comparison."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from bench.bench_compare import trajectory
from models.comparison import _compare, compare_trajectories
from models.cycle_pause import cycle_collection_paused


@pytest.fixture(autouse=True)
def _collector_enabled_after() -> Iterator[None]:
    yield
    gc.enable()


def test_a_pause_disables_and_enables_again() -> None:
    assert gc.isenabled()
    with cycle_collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_enable_when_the_last_ends() -> None:
    first, second = cycle_collection_paused(), cycle_collection_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_disabled_by_someone_else_stays_disabled() -> None:
    gc.disable()
    with cycle_collection_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_in_the_body_still_enables() -> None:
    with pytest.raises(ValueError), cycle_collection_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_in_threads_end_with_the_collector_on() -> None:
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cycle_collection_paused():
            inside.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    assert inside.wait(10)
    with cycle_collection_paused():  # starts while the other thread's pause holds
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other one still runs: it stays off
    release.set()
    other.join(10)
    assert gc.isenabled()


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
    assert len(comparison.diffs) > 100  # it built many objects
    assert compare_trajectories(source, replay) == comparison
    # the same work outside compare_trajectories' pause runs collection after collection
    gc.collect()
    collections.clear()
    _compare(source, replay)
    assert len(collections) > 10
