"""SideEffectRetryWorkflow (id = the side effect id): the durable retry of a write proved not
applied. It checks (run verified, FAILED or RECONCILED not applied), then executes the write
once through its original provider with its original idempotency key and records the result.
An unknown outcome is UNKNOWN again and is never retried automatically; a worker killed
mid-retry leaves a workflow that finishes once (see ``execute_side_effect_retry``)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.side_effects import NON_RETRYABLE, SideEffectRetryActivities
    from models.retry_flow import RetryCheck, SideEffectRetryResult

RETRY = RetryPolicy(maximum_attempts=5, non_retryable_error_types=list(NON_RETRYABLE))


@workflow.defn(name="SideEffectRetry")
class SideEffectRetryWorkflow:
    @workflow.run
    async def run(self, side_effect_id: str) -> SideEffectRetryResult:
        """Check the side effect and execute it once; a refusal (UNKNOWN, applied, a run that
        does not verify) fails the workflow with the reason and reaches no provider.
        Deterministic: every read and write is an activity; the history holds ids only."""
        check: RetryCheck = await workflow.execute_activity_method(
            SideEffectRetryActivities.check_side_effect_retry,
            side_effect_id,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RETRY,
        )
        return await workflow.execute_activity_method(
            SideEffectRetryActivities.execute_side_effect_retry,
            check,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RETRY,
        )
