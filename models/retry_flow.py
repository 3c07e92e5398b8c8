"""What travels through Temporal for a durable side-effect retry (ids and statuses only)."""

from __future__ import annotations

from models.base import Record


class RetryCheck(Record):
    """A side effect found eligible for a retry: its run verified, proved not applied. The
    record hash pins the state checked, so a retried execution can tell that an earlier
    attempt of the same retry already moved it on."""

    side_effect_id: str
    run_id: str
    capability_id: str
    status: str
    record_hash: str


class SideEffectRetryResult(Record):
    side_effect_id: str
    run_id: str
    capability_id: str
    #: the side effect's status after the retry: CONFIRMED, FAILED or UNKNOWN
    status: str
    receipt: str | None = None
    #: how this result came about, in a line
    detail: str = ""
