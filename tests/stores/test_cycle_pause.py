"""The full check's pause of the cyclic collector: counted, and never enabling a collector that
someone else disabled."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from stores.sql.cycle_pause import cycle_collection_paused


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
