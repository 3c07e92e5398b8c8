"""The support desk's side-effect reconcilers (SIMULATION providers, real reconciliation).

Both ask the provider's query API by the ``provider_request_id`` the write was filed under;
both are read-only (a lookup is logged by the provider as operation ``lookup``).

- Payments: the payment provider files a refund under its ``provider_request_id`` in the same
  transaction that commits it, so its answer is authoritative either way: found (with the same
  idempotency key) is APPLIED, absent is NOT_APPLIED.
- Email: a message missing from the provider's log may still be queued or delivered, and a
  second email is a duplicate the customer sees, so absence is INCONCLUSIVE (a human decides);
  found is APPLIED.

Anything that cannot be settled (no request id to ask by, a row filed under another
idempotency key) is INCONCLUSIVE.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from examples.support_desk.providers import SimulatedWorld
from forensics.reconcile import ReconciliationOutcome, ReconciliationResult, SideEffectReconciler
from models import SideEffectRecord

__all__ = ["EmailReconciler", "PaymentReconciler", "support_desk_reconcilers"]

Lookup = Callable[[str], Awaitable[dict[str, Any] | None]]
R = ReconciliationOutcome


class _ProviderLookupReconciler:
    capability_id = ""
    name = ""
    #: what the provider's silence proves
    absent: ReconciliationOutcome = R.INCONCLUSIVE

    def __init__(self, lookup: Lookup) -> None:
        self.lookup = lookup

    def supports(self, capability_id: str) -> bool:
        return capability_id == self.capability_id

    def _receipt(self, row: dict[str, Any]) -> str:
        raise NotImplementedError

    async def reconcile(self, record: SideEffectRecord) -> ReconciliationResult:
        """Look the write up at the provider by its ``provider_request_id``."""
        preq = record.provider_request_id
        if not preq:
            return ReconciliationResult(
                outcome=R.INCONCLUSIVE, evidence="no provider_request_id was recorded to ask by"
            )
        row = await self.lookup(preq)
        if row is None:
            return ReconciliationResult(
                outcome=self.absent, evidence=f"{self.name} has no request {preq}"
            )
        if row.get("idempotency_key") != record.idempotency_key:
            return ReconciliationResult(
                outcome=R.INCONCLUSIVE,
                evidence=f"{self.name} filed {preq} under another idempotency key",
            )
        receipt = self._receipt(row)
        return ReconciliationResult(
            outcome=R.APPLIED,
            evidence=f"{self.name} holds {receipt} under request {preq}",
            provider_receipt=receipt,
        )


class PaymentReconciler(_ProviderLookupReconciler):
    capability_id = "payment.refund"
    name = "payments"
    absent = R.NOT_APPLIED

    def _receipt(self, row: dict[str, Any]) -> str:
        return str(row["refund_id"])


class EmailReconciler(_ProviderLookupReconciler):
    capability_id = "email.send"
    name = "email"
    absent = R.INCONCLUSIVE

    def _receipt(self, row: dict[str, Any]) -> str:
        return str(row["message_id"])


def support_desk_reconcilers(world: SimulatedWorld) -> list[SideEffectReconciler]:
    """The reconcilers of the support desk's WRITE capabilities, on ``world``'s providers."""
    return [PaymentReconciler(world.lookup_refund), EmailReconciler(world.lookup_email)]
