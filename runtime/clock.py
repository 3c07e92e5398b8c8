"""The agent's clock (rule 6). Agent code reads ``env.clock.now()``, never the system clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


@runtime_checkable
class AgentClock(Protocol):
    def now(self) -> datetime: ...


class RecordingClock(AgentClock, Protocol):
    """A run recorder's clock: the agent's reads (``now``) and the time events are stamped
    with (``logical_time``): the system's, a replay's recorded readings or an ingested run's."""

    def logical_time(self) -> datetime: ...


def system_time() -> datetime:
    return datetime.now(UTC)


class SystemAgentClock:
    """Production clock: the system time, with every read handed to ``on_read`` so the
    recorder can write it into the run (replay then reproduces the same readings)."""

    def __init__(
        self,
        on_read: Callable[[datetime], None] | None = None,
        source: Callable[[], datetime] = system_time,
    ) -> None:
        self._on_read = on_read
        self._source = source

    def now(self) -> datetime:
        value = self._source()
        if self._on_read is not None:
            self._on_read(value)
        return value

    def logical_time(self) -> datetime:
        """The time events are stamped with; not an agent read, so not recorded as one."""
        return self._source()
