"""How many warm sandbox processes a replay worker should hold: its standing pool, plus the
child replays announced by a fan-out (an incident's replays, a ``--repeat`` parent) that have
not taken a process yet.

A fan-out is announced under a key, the id its child replays' ids start with (``INC-7-exact``
for ``INC-7-exact-000`` …); announcing a key again replaces its count (so an incident's early
announcement and its replay parent's own do not add up), a child taking a process counts one
off its key, and an announcement nobody came for is forgotten after ``EXPECT_SECONDS`` (a
parent that failed, or children that landed on another worker). A key stays known as a fan-out
(``announced``: its children may share processes, ``siblings``) until ``EXPECT_SECONDS`` after
its last announcement, also once all its children came. Pure bookkeeping: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: an announced fan-out whose children have not all come by then is forgotten
EXPECT_SECONDS = 300.0


@dataclass
class Demand:
    """Announced child replays not yet started, by fan-out key."""

    #: key -> (children still to come, monotonic time the announcement lapses)
    _expected: dict[str, tuple[int, float]] = field(default_factory=dict)
    #: key -> monotonic time its last announcement lapses
    _announced: dict[str, float] = field(default_factory=dict)

    def expect(self, key: str, count: int, now: float) -> None:
        """``count`` children of ``key`` are about to want a process (0 forgets the count)."""
        self._announced[key] = max(self._announced.get(key, now), now + EXPECT_SECONDS)
        self._count(key, count, now)

    def announced(self, key: str, now: float) -> bool:
        """Whether ``key`` is a fan-out announced within the last ``EXPECT_SECONDS``."""
        for lapsed in [k for k, until in self._announced.items() if until <= now]:
            del self._announced[lapsed]
        return key in self._announced

    def _count(self, key: str, count: int, now: float) -> None:
        if count > 0:
            self._expected[key] = (count, now + EXPECT_SECONDS)
        else:
            self._expected.pop(key, None)

    def taken(self, replay_id: str) -> None:
        """The replay ``replay_id`` took a process: one less to come for its fan-out."""
        key, _, _ = replay_id.rpartition("-")
        if key in self._expected:
            count, until = self._expected[key]
            self._count(key, count - 1, until - EXPECT_SECONDS)

    def wanted(self, now: float) -> int:
        """Children announced and still to come (lapsed announcements dropped)."""
        for key in [k for k, (_, until) in self._expected.items() if until <= now]:
            del self._expected[key]
        return sum(count for count, _ in self._expected.values())

    def next_lapse(self) -> float | None:
        """When the earliest announcement lapses (None: nothing announced)."""
        return min((until for _, until in self._expected.values()), default=None)
