"""What an incident, ``replay start --wait`` and the API say when a workflow failed: the
worker's own error, never the wrapper's "Activity task failed" (issue 32, item 1)."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

from workflows.failure_cause import failure_cause


def _activity_error(cause: BaseException | None) -> ActivityError:
    error = ActivityError(
        "Activity task failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="worker",
        activity_type="prepare_replay",
        activity_id="1",
        retry_state=None,
    )
    error.__cause__ = cause
    return error


def _child_error(cause: BaseException) -> ChildWorkflowError:
    error = ChildWorkflowError(
        "Child Workflow execution failed",
        namespace="default",
        workflow_id="INC-1-exact",
        run_id="r",
        workflow_type="Replay",
        initiated_event_id=9,
        started_event_id=10,
        retry_state=None,
    )
    error.__cause__ = cause
    return error


def test_the_innermost_application_error_is_named() -> None:
    worker = ApplicationError(
        "model 'endpoint' is not configured for tool-loop (known: )", type="InvalidInputError"
    )
    worker.__cause__ = ApplicationError("the Python chain under it", type="KeyError")
    chained = _child_error(_activity_error(worker))
    assert str(chained.cause) == "Activity task failed"
    assert failure_cause(chained) == (
        "InvalidInputError: model 'endpoint' is not configured for tool-loop (known: )"
    )
    assert failure_cause(_activity_error(worker)) == failure_cause(chained)


def test_a_wrapper_with_nothing_under_it_says_what_it_is() -> None:
    assert failure_cause(_activity_error(None)) == "ActivityError: Activity task failed"
    typed = ApplicationError("InvalidInputError: already typed", type="InvalidInputError")
    assert failure_cause(typed) == "InvalidInputError: already typed"
    assert failure_cause(ApplicationError("no type given")) == "no type given"
