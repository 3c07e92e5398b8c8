"""A workflow's ``status`` query as a test's poll asks it."""

from __future__ import annotations

from typing import TypeVar

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

_View = TypeVar("_View")

#: the Python SDK's deadlock detector: the activation answering the query did not finish within
#: its 2 s. The query handlers only return the state the workflow keeps (each activation takes
#: milliseconds, measured), so on a loaded machine this means the worker's thread got no CPU in
#: time; the workflow itself is unharmed (the worker evicts it and rebuilds it from history)
DEADLOCK_DETECTED = "[TMPRL1101]"


async def query_status(handle: WorkflowHandle, result_type: type[_View]) -> _View | None:
    """The workflow's ``status``, or None when the worker's deadlock detector refused this one
    query, which the poll then asks again like a phase not reached yet. Any other query
    failure is raised: it would be the workflow's fault."""
    try:
        return await handle.query("status", result_type=result_type)
    except WorkflowQueryFailedError as exc:
        if DEADLOCK_DETECTED in exc.message:
            return None
        raise
