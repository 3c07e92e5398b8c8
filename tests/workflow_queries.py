"""A workflow's ``status`` query as a test's poll asks it."""

from __future__ import annotations

from typing import TypeVar

from temporalio.client import WorkflowHandle, WorkflowQueryFailedError

from app.workflow_queries import refused_by_deadlock_detector

_View = TypeVar("_View")


async def query_status(handle: WorkflowHandle, result_type: type[_View]) -> _View | None:
    """The workflow's ``status``, or None when the worker's deadlock detector refused this one
    query (``app.workflow_queries``), which the poll then asks again like a phase not reached
    yet. Any other query failure is raised: it would be the workflow's fault."""
    try:
        return await handle.query("status", result_type=result_type)
    except WorkflowQueryFailedError as exc:
        if refused_by_deadlock_detector(exc):
            return None
        raise
