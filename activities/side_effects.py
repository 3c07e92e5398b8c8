"""The activities of the ``SideEffectRetry`` workflow: thin shells over the retry core
(``runtime.side_effect_retry``) that turn its refusals into non-retryable Temporal failures
named by their persisted error type."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from models.errors import ReplaybookError
from models.retry_flow import RetryCheck, SideEffectRetryResult
from runtime.side_effect_retry import ProvidersFor, execute_checked_retry, retry_check
from stores.bundle import Stores

__all__ = ["NON_RETRYABLE", "SideEffectRetryActivities"]

#: refusals that another attempt cannot change
NON_RETRYABLE = (
    "ReconciliationRequiredError",
    "RetryNotAllowedError",
    "ChainBrokenError",
    "NotFoundError",
    "InvalidInputError",
    "ConfigurationError",
)


class SideEffectRetryActivities:
    def __init__(self, stores: Stores, providers_for: ProvidersFor) -> None:
        self.stores = stores
        self.providers_for = providers_for

    @activity.defn(name="check_side_effect_retry")
    async def check_side_effect_retry(self, side_effect_id: str) -> RetryCheck:
        """Verify the side effect's run and that it is proved not applied (FAILED, or
        RECONCILED not applied); a refusal is a non-retryable failure naming why. Reads only."""
        try:
            return await retry_check(self.stores, side_effect_id)
        except ReplaybookError as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc

    @activity.defn(name="execute_side_effect_retry")
    async def execute_side_effect_retry(self, check: RetryCheck) -> SideEffectRetryResult:
        """Execute the checked write once through its original provider with its original
        idempotency key, recording EXECUTING then CONFIRMED, FAILED or UNKNOWN in its run.

        Run again after a crash, it never calls the provider a second time: if an earlier
        attempt left the write EXECUTING, the outcome is unknown and the write is recorded
        UNKNOWN (to reconcile); if an earlier attempt finished, its result is returned."""
        try:
            return await execute_checked_retry(self.stores, check, self.providers_for)
        except ReplaybookError as exc:
            if not exc.retryable or type(exc).__name__ in NON_RETRYABLE:
                raise ApplicationError(
                    str(exc), type=type(exc).__name__, non_retryable=True
                ) from exc
            raise
