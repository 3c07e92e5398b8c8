"""Side-effect operations the faces share: retrying a write proved not applied — directly, or
durably as the ``SideEffectRetry`` workflow — and reading back the exact arguments it was
recorded with (the core lives in ``runtime.side_effect_retry``; the workflow's activities
run it too).

The live tool providers are a parameter (``providers_for``: graph id -> providers): the
composition root knows the deployment's agents and their worlds, this module does not."""

from __future__ import annotations

from typing import Any

from app.replays import ClientSource
from models import SideEffectRecord
from models.errors import (
    ChainBrokenError,
    InvalidInputError,
    NotFoundError,
    ReconciliationRequiredError,
    ReplaybookError,
    RetryNotAllowedError,
    StoreError,
)
from models.queues import CONTROL_QUEUE
from models.retry_flow import SideEffectRetryResult
from runtime.side_effect_retry import (
    ProvidersFor,
    check_retry,
    recorded_arguments,
    retry_recorded_side_effect,
)
from stores.bundle import Stores
from stores.sql.side_effect_leases import sweep_expired_side_effects

__all__ = [
    "ProvidersFor",
    "check_retry",
    "recorded_arguments",
    "retry_durably",
    "retry_recorded_side_effect",
]


async def retry_durably(
    client: ClientSource, stores: Stores, side_effect_id: str
) -> dict[str, Any]:
    """Check the side effect here (so a refusal costs no workflow and says why at once), then
    start — or join, when one is running — the ``SideEffectRetry`` workflow whose id is the
    side effect id, and wait for its result. The workflow checks again and executes once."""
    from temporalio.client import WorkflowFailureError
    from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

    from workflows.side_effect_retry import SideEffectRetryWorkflow

    await check_retry(stores, side_effect_id)
    handle = await (await client()).start_workflow(
        SideEffectRetryWorkflow.run,
        side_effect_id,
        id=side_effect_id,
        task_queue=CONTROL_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )
    try:
        result: SideEffectRetryResult = await handle.result()
    except WorkflowFailureError as exc:
        raise _refusal(exc) from None
    return result.model_dump(mode="json")


_REFUSALS: dict[str, type[ReplaybookError]] = {
    "ReconciliationRequiredError": ReconciliationRequiredError,
    "RetryNotAllowedError": RetryNotAllowedError,
    "ChainBrokenError": ChainBrokenError,
    "NotFoundError": NotFoundError,
    "InvalidInputError": InvalidInputError,
}


def _refusal(exc: Exception) -> ReplaybookError:
    """The Replaybook error a failed retry workflow carries (by its persisted type name)."""
    from temporalio.exceptions import ApplicationError

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ApplicationError) and cause.type in _REFUSALS:
            return _REFUSALS[cause.type](cause.message)
        cause = cause.__cause__ or getattr(cause, "cause", None)
    return StoreError(f"the retry workflow failed: {exc}")


async def sweep_expired(stores: Stores, lease_seconds: float) -> list[SideEffectRecord]:
    """Every side effect left EXECUTING past ``lease_seconds``, now UNKNOWN (those the stores
    swept when they opened included): the process that dispatched it died before recording
    the outcome, so the write may have happened."""
    return stores.swept + await sweep_expired_side_effects(stores.ledger, lease_seconds)
