"""How the worker ends a batch its broker refused or stopped, whatever the child answered.

The child's own account is not trusted (it may have caught the refusal and reported a
finished step), so the worker records the end in the replay's run itself: a ``RUN_FAILED``
event of the step carrying the reason and the refused calls, sanitized like any replay
evidence. A refusal then fails the replay with ``SandboxViolationError``; a quota stops it
with a partial result (the run closed FAILED, the outcome COMPLETED with ``partial`` and the
reason), like a spent budget. A step still running when the replay's time limit passes
(``StepInput.deadline``) is stopped the same way, with a ``budget:`` reason (INCONCLUSIVE,
BUDGET).
"""

from __future__ import annotations

import structlog
from pydantic import JsonValue

from activities.metrics import SANDBOX_VIOLATION_TOTAL
from activities.sandbox.broker import StepBroker
from models import ExecutionEventType, RunStatus
from models.errors import SandboxQuotaError, SandboxViolationError
from models.replay_flow import StepInput, StepOutput
from runtime.ports import NewEvent
from runtime.replay.engine import ReplayEngine

log = structlog.get_logger(__name__)


def count(kinds: list[str]) -> None:
    for kind in kinds:
        SANDBOX_VIOLATION_TOTAL.labels(kind=kind).inc()


def reason(broker: StepBroker) -> str:
    if broker.violation is not None:
        return f"{SandboxViolationError.__name__}: {broker.violation}"
    return f"{SandboxQuotaError.__name__}: {broker.over_quota}"


async def end_batch(
    engine: ReplayEngine, broker: StepBroker, step: StepInput, stopped: str | None = None
) -> StepOutput:
    """Record why the batch ended in the replay's run; raise the violation, or return the
    partial output of a quota stop or of ``stopped`` (the deadline passed inside the step)."""
    count(broker.kinds)
    why = stopped if stopped is not None and not broker.ended else reason(broker)
    replay_id = step.plan.replay_id
    log.warning("sandboxed step ended", replay_id=replay_id, step=step.step_id, reason=why)
    last = (await engine.ledger.events(replay_id, from_sequence=step.head))[-1]
    payload: dict[str, JsonValue] = {
        "error": why.split(":", 1)[0],
        "message": why,
        "step": step.step_id,
        "refused": list[JsonValue](broker.refused),
        # a refusal fails the replay; a quota stops it with what it had done
        "partial": broker.violation is None,
    }
    event = broker.guard.sanitized_event(
        NewEvent(step.step_id, ExecutionEventType.RUN_FAILED, last.logical_time, payload=payload)
    )
    appended = await engine.ledger.append_many(
        replay_id, [event], expected_sequence=last.sequence + 1
    )
    if broker.violation is not None:
        # the workflow fails the replay and closes its run (close_replay_run)
        raise SandboxViolationError(broker.violation, retryable=False)
    await engine.ledger.finish_run(replay_id, RunStatus.FAILED, {"stopped": why})
    return StepOutput(
        step_id=step.step_id,
        steps=broker.completed_steps + 1,
        state_ref=step.state_ref,
        cursors=step.cursors,
        head=appended[-1].sequence,
        usage=broker.usage(),
        stopped=why,
        finished=True,
        written_bytes=broker.written,
    )
