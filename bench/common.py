"""What every benchmark row shares: a figure and its baseline measured in the same run, in
interleaved rounds (so a change of machine load hits both alike), reported as medians, with
their ratio and the machine's load when they were taken."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any


def machine_load() -> str:
    """The 1-minute load average and the core count, as ``uptime`` shows them."""
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} on {os.cpu_count()} cores"


def interleaved(
    candidates: dict[str, Callable[[], object]],
    *,
    rounds: int = 7,
    round_s: float = 0.1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds per call of each candidate over ``rounds`` rounds; in each round every
    candidate runs about ``round_s`` seconds, the order alternating from round to round.
    ``clock=time.process_time`` measures CPU seconds of single-threaded work instead, which
    the other processes of a loaded machine disturb far less than wall time."""
    samples = interleaved_samples(candidates, rounds=rounds, round_s=round_s, clock=clock)
    return {name: statistics.median(values) for name, values in samples.items()}


@dataclass(frozen=True)
class Spread:
    """The median of a figure's rounds and their extremes."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def text(self, scale: float = 1e3, unit: str = "ms", digits: int = 3) -> str:
        """``median unit (low–high)``."""
        return (
            f"{self.median * scale:.{digits}f} {unit} "
            f"({self.low * scale:.{digits}f}–{self.high * scale:.{digits}f})"
        )


def ratio_spread(numerator: list[float], denominator: list[float]) -> Spread:
    """The per-round ratios of two interleaved figures (round i of each), as a spread."""
    return Spread.of([a / b for a, b in zip(numerator, denominator, strict=True)])


def interleaved_samples(
    candidates: dict[str, Callable[[], object]],
    *,
    rounds: int = 7,
    round_s: float = 0.1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """``interleaved``'s per-round seconds per call, round by round (for spreads and ratios)."""
    numbers = {}
    for name, fn in candidates.items():
        started = clock()
        fn()  # warm up, and size the batches
        once = max(clock() - started, 1e-7)
        numbers[name] = max(1, int(round_s / once))
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for r in range(rounds):
        for name in order if r % 2 == 0 else reversed(order):
            fn, number = candidates[name], numbers[name]
            started = clock()
            for _ in range(number):
                fn()
            samples[name].append((clock() - started) / number)
    return samples


async def ainterleaved(
    candidates: dict[str, Callable[[], Awaitable[object]]], *, rounds: int = 5
) -> dict[str, float]:
    """``interleaved`` for coroutines: median seconds of one call of each, over ``rounds``."""
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for fn in candidates.values():
        await fn()  # warm up
    for r in range(rounds):
        for name in order if r % 2 == 0 else reversed(order):
            started = time.perf_counter()
            await candidates[name]()
            samples[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in samples.items()}


@dataclass
class Row:
    """One row of the performance table (``docs/performance.md``)."""

    figure: str
    value: str
    baseline: str
    ratio: float | None
    goal: str
    met: bool | None
    load: str

    def line(self) -> str:
        ratio = "—" if self.ratio is None else f"{self.ratio:.2f}x"
        verdict = {True: "met", False: "NOT met", None: "—"}[self.met]
        return (
            f"| {self.figure} | {self.value} | {self.baseline} | {ratio} | {self.goal} "
            f"| {verdict} | {self.load} |"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


TABLE_HEADER = (
    "| figure | now | baseline in the same run | ratio | goal | goal met | machine load |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


def emit(row: Row) -> Row:
    """Print ``row`` as a table line (the caller collects it)."""
    print(row.line(), flush=True)
    return row
