"""The real cause of a Temporal failure, in one line.

A child replay whose activity failed reaches its parent as ``ChildWorkflowError`` → ``ActivityError``
("Activity task failed") → ``ApplicationError`` (the worker's error, e.g. ``InvalidInputError:
model 'endpoint' is not configured``). The outer messages say only where it failed; people
need the innermost one. Pure: walks ``.cause`` links, no I/O, safe inside workflows.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError, FailureError

#: the wrappers whose own message only says where the failure happened
_WRAPPER_MESSAGES = (
    "Activity task failed",
    "Child Workflow execution failed",
    "Workflow execution failed",
)


def failure_cause(exc: BaseException) -> str:
    """``"<ErrorType>: <message>"`` of the innermost failure under ``exc`` that says more than
    where it happened (the ``ApplicationError`` a worker raised), or ``str(exc)`` when there
    is nothing underneath."""
    innermost: BaseException = exc
    seen = 0
    # the first ApplicationError is the worker's own error (its causes are its Python chain)
    while (
        isinstance(innermost, FailureError)
        and not isinstance(innermost, ApplicationError)
        and innermost.cause is not None
        and seen < 20
    ):
        innermost, seen = innermost.cause, seen + 1
    if isinstance(innermost, ApplicationError):
        message = innermost.message or str(innermost)
        kind = innermost.type
        return f"{kind}: {message}" if kind and not message.startswith(f"{kind}:") else message
    text = str(innermost) or type(innermost).__name__
    if text in _WRAPPER_MESSAGES:  # a wrapper with no cause: say what it is
        return f"{type(innermost).__name__}: {text}"
    return " ".join(text.split())
