"""``app.replays.replay_view`` (the API's and the CLI's replay status) in the moment between a
replay settling how it ends and its workflow closing: the ``status`` query already says
COMPLETED (or CANCELED) while ``describe`` still says RUNNING. A view that says a replay has
ended must be the ended one, with the result's fields, never the bare progress."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from app.replays import replay_view
from models import ReplayConfidence, ReplayMode, ReplayStatus
from models.replay_flow import ReplayOutcome, ReplayProgress

RUNNING, COMPLETED, CANCELED = (
    WorkflowExecutionStatus.RUNNING,
    WorkflowExecutionStatus.COMPLETED,
    WorkflowExecutionStatus.CANCELED,
)


@dataclass
class Described:
    status: WorkflowExecutionStatus


@dataclass
class Handle:
    """A workflow that ``describe`` shows in ``statuses`` in turn (the last one sticks), whose
    ``status`` query answers ``progress`` and whose result is ``outcome`` (None: it was
    canceled)."""

    statuses: list[WorkflowExecutionStatus]
    progress: ReplayProgress
    outcome: ReplayOutcome | None
    calls: list[str] = field(default_factory=list)

    async def describe(self) -> Described:
        self.calls.append("describe")
        return Described(self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])

    async def query(self, name: str, result_type: type) -> ReplayProgress:
        self.calls.append(f"query {name}")
        return self.progress

    async def result(self) -> ReplayOutcome:
        self.calls.append("result")
        if self.outcome is None:
            raise WorkflowFailureError(cause=CancelledError("canceled"))
        return self.outcome


@dataclass
class Client:
    handle: Handle

    def get_workflow_handle(self, workflow_id: str, **_: Any) -> Handle:
        return self.handle


OUTCOME = ReplayOutcome(
    replay_id="replay-1",
    source_run_id="run-1",
    mode=ReplayMode.PROMPT_SWAP,
    status=ReplayStatus.COMPLETED,
    confidence=ReplayConfidence.FULL,
    summary={"runs": 3, "reproduced": 0},
    children=("replay-1-000", "replay-1-001", "replay-1-002"),
)


async def test_a_replay_whose_query_says_completed_before_the_close_shows_its_result() -> None:
    handle = Handle([RUNNING, COMPLETED], ReplayProgress(status=ReplayStatus.COMPLETED), OUTCOME)
    view = await replay_view(Client(handle), "replay-1")  # type: ignore[arg-type]
    assert view["status"] == "COMPLETED" and view["mode"] == "PROMPT_SWAP"
    assert view["confidence"] == "FULL" and view["summary"] == {"runs": 3, "reproduced": 0}
    assert [c["replay_id"] for c in view["children"]] == list(OUTCOME.children)
    assert handle.calls == ["describe", "query status", "result"]


async def test_a_replay_whose_query_says_canceled_before_the_close_shows_the_close() -> None:
    handle = Handle([RUNNING, CANCELED], ReplayProgress(status=ReplayStatus.CANCELED), None)
    view = await replay_view(Client(handle), "replay-1")  # type: ignore[arg-type]
    assert view == {"replay_id": "replay-1", "status": "CANCELED", "workflow_status": "CANCELED"}
    assert handle.calls == ["describe", "query status", "result", "describe"]


async def test_a_running_replay_shows_its_progress_without_waiting() -> None:
    progress = ReplayProgress(status=ReplayStatus.RUNNING, steps_executed=2)
    handle = Handle([RUNNING], progress, OUTCOME)
    view = await replay_view(Client(handle), "replay-1")  # type: ignore[arg-type]
    assert view["status"] == "RUNNING" and view["steps_executed"] == 2 and "mode" not in view
    assert "result" not in handle.calls


async def test_a_completed_replay_shows_its_result_and_a_canceled_one_its_status() -> None:
    done = Handle([COMPLETED], ReplayProgress(status=ReplayStatus.COMPLETED), OUTCOME)
    assert (await replay_view(Client(done), "replay-1"))["mode"] == "PROMPT_SWAP"  # type: ignore[arg-type]
    assert "query status" not in done.calls
    canceled = Handle([CANCELED], ReplayProgress(status=ReplayStatus.CANCELED), None)
    view = await replay_view(Client(canceled), "replay-1")  # type: ignore[arg-type]
    assert view["status"] == "CANCELED" and canceled.calls == ["describe"]
