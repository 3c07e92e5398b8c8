"""A workflow's ``status`` query, asked again when the SDK's deadlock detector refused it.

The Python SDK answers a query on the workflow's thread and refuses it with ``[TMPRL1101]``
when that activation did not finish within 2 s. Our query handlers only return the state the
workflow keeps (milliseconds, measured), so the refusal means the worker's thread got no CPU in
time on a loaded machine; the workflow is unharmed (the worker evicts it and rebuilds it from
history). A caller — the API, the CLI, a test's poll — should see the answer, not a 500.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, TypeVar

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

_View = TypeVar("_View")

DEADLOCK_DETECTED = "[TMPRL1101]"
#: how long a refused query is asked again before the refusal is the caller's answer
RETRY_SECONDS = 10.0
_PAUSE_SECONDS = 0.1


def refused_by_deadlock_detector(exc: WorkflowQueryFailedError) -> bool:
    return DEADLOCK_DETECTED in exc.message


async def query_status(
    handle: WorkflowHandle[Any, Any],
    result_type: type[_View],
    *,
    retry_seconds: float = RETRY_SECONDS,
) -> _View:
    """The workflow's ``status``; a deadlock-detector refusal is asked again for up to
    ``retry_seconds``, then raised. Any other query failure is raised at once."""
    deadline = time.monotonic() + retry_seconds
    while True:
        try:
            return await handle.query("status", result_type=result_type)
        except WorkflowQueryFailedError as exc:
            if not refused_by_deadlock_detector(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(_PAUSE_SECONDS)
