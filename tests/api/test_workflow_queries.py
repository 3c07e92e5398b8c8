"""A ``status`` query refused by the SDK's deadlock detector is asked again; any other failure
is the caller's answer at once."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import WorkflowQueryFailedError

from app.workflow_queries import query_status

REFUSED = "[TMPRL1101] Potential deadlock detected: workflow didn't yield within 2 second(s)"


class _Handle:
    """Answers ``status`` after the given failures (a stand-in for a workflow handle)."""

    def __init__(self, failures: list[str]) -> None:
        self.failures = failures
        self.asked = 0

    async def query(self, name: str, result_type: Any = None) -> str:
        assert name == "status"
        self.asked += 1
        if self.failures:
            raise WorkflowQueryFailedError(self.failures.pop(0))
        return "the view"


async def test_a_refused_query_is_asked_again() -> None:
    handle = _Handle([REFUSED, REFUSED])
    assert await query_status(handle, str) == "the view"  # type: ignore[arg-type]
    assert handle.asked == 3


async def test_another_failure_is_raised_at_once() -> None:
    handle = _Handle(["the workflow's handler raised", REFUSED])
    with pytest.raises(WorkflowQueryFailedError, match="handler raised"):
        await query_status(handle, str)  # type: ignore[arg-type]
    assert handle.asked == 1


async def test_a_refusal_past_the_deadline_is_raised() -> None:
    handle = _Handle([REFUSED] * 100)
    with pytest.raises(WorkflowQueryFailedError, match="TMPRL1101"):
        await query_status(handle, str, retry_seconds=0.0)  # type: ignore[arg-type]
    assert handle.asked == 1
