"""Retrying a side effect proved not applied (rule 5): the core the ``SideEffectRetry``
workflow's activities and the faces (through ``app.side_effects``) share. Only an effect proved
not applied reaches its provider, once, and only after that is established are its raw
arguments read (an audited decryption).

What a retry appends to the write's run (EXECUTING, the outcome with the provider's receipt, the
UNKNOWN that settles an interrupted attempt) is recorded under the run's pinned redaction policy
(``runtime.privacy.appending``): a receipt naming a person is chained as its pseudonym, its raw
form sealed under the run's key; a copy made of sanitized evidence only gets a raw row saying
its raw form is itself."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog

from models import PolicyDecisionRecord, SideEffectRecord, SideEffectStatus
from models.canonical import canonical_hash
from models.errors import (
    ConfigurationError,
    InvalidInputError,
    NotFoundError,
    RetryNotAllowedError,
)
from models.ingest import is_ingested
from models.retry_flow import RetryCheck, SideEffectRetryResult
from runtime.ports import ArtifactStore, EventLedger, EvidenceReader
from runtime.privacy.appending import appending_recorder, run_appender
from runtime.privacy.service import PrivacyService
from runtime.side_effects import check_retry_allowed, retry_side_effect, settle_interrupted_retry
from runtime.tools import ToolCallContext, ToolProvider
from runtime.verification import require_verified

__all__ = [
    "PolicyDecisions",
    "ProvidersFor",
    "RetryStores",
    "check_retry",
    "execute_checked_retry",
    "recorded_arguments",
    "retry_check",
    "retry_recorded_side_effect",
]

log = structlog.get_logger(__name__)

#: graph id -> the agent's live tool providers
ProvidersFor = Callable[[str], Awaitable[Mapping[str, ToolProvider]]]


class PolicyDecisions(Protocol):
    """The run's policy decisions (``stores.sql.views.SqlRunViews``)."""

    async def policy_decisions(self, run_id: str) -> list[tuple[int, dict[str, Any]]]:
        """(event sequence, stored record) of each policy decision, in recording order."""
        ...


class RetryStores(Protocol):
    """What a retry reads and writes (``stores.bundle.Stores`` offers all of it)."""

    @property
    def ledger(self) -> EventLedger: ...

    @property
    def artifacts(self) -> ArtifactStore: ...

    @property
    def evidence(self) -> EvidenceReader: ...

    @property
    def privacy(self) -> PrivacyService | None: ...

    @property
    def run_views(self) -> PolicyDecisions: ...


async def recorded_arguments(stores: RetryStores, record: SideEffectRecord) -> dict[str, Any]:
    """The exact arguments of the recorded action: the policy decision whose input hash is the
    action hash holds them."""
    for sequence, stored in await stores.run_views.policy_decisions(record.run_id):
        decision = PolicyDecisionRecord.model_validate(stored)
        if decision.input_hash == record.action_hash and isinstance(decision.sanitized_input, dict):
            # the stored input is the sanitized view: the provider needs the raw arguments,
            # read (with the KEK, audited) from the encrypted raw payload of that decision
            if stores.privacy is None:
                raise ConfigurationError(
                    "raw evidence cannot be read: no privacy service is configured"
                )
            raw = await stores.privacy.read_raw_evidence(
                record.run_id,
                sequence,
                actor="side-effects-retry",
                # read only after ``check_retry``: the reason states what was checked
                reason=f"retry of side effect {record.side_effect_id} proved not applied "
                f"({record.status.value})",
            )
            return dict(raw.content["sanitized_input"]["arguments"])
    raise NotFoundError(f"the arguments of side effect {record.side_effect_id} are not recorded")


async def check_retry(stores: RetryStores, side_effect_id: str) -> SideEffectRecord:
    """The side effect, once its run verifies and it is proved not applied; otherwise
    ``NotFoundError``, ``ChainBrokenError``, ``ReconciliationRequiredError`` (UNKNOWN) or
    ``RetryNotAllowedError``. Reads only: nothing is decrypted, audited or sent anywhere."""
    record: SideEffectRecord = await stores.evidence.record(SideEffectRecord, side_effect_id)
    # the status and arguments read here come from lookup rows: they must be what the chained
    # events say before a provider is called on their word
    await require_verified(stores.ledger, record.run_id, to=f"retry side effect {side_effect_id}")
    # an ingested write is never Replaybook's to send, whatever its status
    run = await stores.ledger.get_run(record.run_id)
    if is_ingested(run.graph_id, run.labels):
        raise RetryNotAllowedError(
            f"side effect {side_effect_id} ({record.capability_id}, {record.status.value}) was "
            f"ingested from {run.labels.get('source') or 'another system'}: Replaybook has no "
            "provider for it; retry it in the system that made it"
        )
    check_retry_allowed(record)
    return record


async def retry_recorded_side_effect(
    stores: RetryStores, side_effect_id: str, providers_for: ProvidersFor
) -> dict[str, Any]:
    """Retry a write only if it is proved not applied (FAILED, or RECONCILED not applied), with
    its original idempotency key and arguments. An UNKNOWN one raises
    ``ReconciliationRequiredError`` before its raw arguments are read (and audited) and before
    anything reaches the provider. The durable form is the ``SideEffectRetry`` workflow."""
    record = await check_retry(stores, side_effect_id)
    run = await stores.ledger.get_run(record.run_id)
    # the provider first: a write nothing here can send is refused before its raw arguments
    # are decrypted (and that read audited as a retry)
    try:
        providers = await providers_for(run.graph_id)
    except InvalidInputError as exc:
        raise RetryNotAllowedError(f"side effect {side_effect_id}: {exc}") from None
    if record.capability_id not in providers:
        raise RetryNotAllowedError(
            f"side effect {side_effect_id}: agent {run.graph_id!r} has no provider for "
            f"{record.capability_id} here"
        )
    # sanitized as the run was recorded: the receipt may name a person (rule 17)
    recorder = appending_recorder(stores.ledger, stores.artifacts, run)
    recorder.step_id = record.step_id
    arguments = await recorded_arguments(stores, record)

    async def call(key: str, preq: str) -> dict:
        context = ToolCallContext(record.run_id, recorder.logical_time(), key, preq)
        return await providers[record.capability_id](arguments, context)

    final, receipt = await retry_side_effect(stores.evidence, recorder, side_effect_id, call)
    return {"side_effect_id": side_effect_id, "status": final.status.value, "receipt": receipt}


def _hash(record: SideEffectRecord) -> str:
    return canonical_hash(record.model_dump(mode="json"))


async def retry_check(stores: RetryStores, side_effect_id: str) -> RetryCheck:
    """``check_retry``'s answer as the workflow carries it: the record's hash pins the state
    that was checked, so a later attempt can tell whether an earlier one already acted."""
    record = await check_retry(stores, side_effect_id)
    return RetryCheck(
        side_effect_id=side_effect_id,
        run_id=record.run_id,
        capability_id=record.capability_id,
        status=record.status.value,
        record_hash=_hash(record),
    )


async def execute_checked_retry(
    stores: RetryStores, check: RetryCheck, providers_for: ProvidersFor
) -> SideEffectRetryResult:
    """Execute the checked write once through its original provider with its original
    idempotency key, recording EXECUTING then CONFIRMED, FAILED or UNKNOWN in its run.

    Run again after a crash, it never calls the provider a second time: if an earlier attempt
    left the write EXECUTING, the outcome is unknown and the write is recorded UNKNOWN (to
    reconcile); if an earlier attempt finished, its result is returned."""
    record: SideEffectRecord = await stores.evidence.record(SideEffectRecord, check.side_effect_id)
    base = {
        "side_effect_id": check.side_effect_id,
        "run_id": check.run_id,
        "capability_id": check.capability_id,
    }
    if _hash(record) != check.record_hash:
        if record.status is SideEffectStatus.EXECUTING:
            recorder = await run_appender(stores.ledger, stores.artifacts, record.run_id)
            record = await settle_interrupted_retry(recorder, record)
            detail = "an earlier attempt stopped mid-call: UNKNOWN, reconcile before anything"
        else:
            detail = "an earlier attempt of this retry already finished"
        log.warning("side effect retry resumed", detail=detail, **base)
        return SideEffectRetryResult(
            **base, status=record.status.value, receipt=record.provider_receipt, detail=detail
        )
    done = await retry_recorded_side_effect(stores, check.side_effect_id, providers_for)
    final: SideEffectRecord = await stores.evidence.record(SideEffectRecord, check.side_effect_id)
    log.info("side effect retried", status=done["status"], **base)
    return SideEffectRetryResult(
        **base,
        status=done["status"],
        receipt=final.provider_receipt,
        detail="executed once with the original idempotency key",
    )
