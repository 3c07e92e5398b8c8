"""Nothing acts on evidence that does not verify: the one check every consumer of a run's
evidence (retry, reconciliation, freeze, replay, the regression gate) makes before acting."""

from __future__ import annotations

from models.chain import ChainVerification
from models.errors import ChainBrokenError
from runtime.ports import EventLedger

__all__ = ["require_verified"]


async def require_verified(ledger: EventLedger, run_id: str, *, to: str) -> ChainVerification:
    """The run's full verification; ``ChainBrokenError`` naming the first problem when it does
    not verify (``to`` says what was refused, e.g. ``retry side effect se-…``)."""
    verification = await ledger.verify(run_id)
    if not verification.intact:
        raise ChainBrokenError(
            f"refusing to {to}: run {run_id} does not verify: {verification.summary()}",
            sequence=verification.broken_at,
        )
    return verification
