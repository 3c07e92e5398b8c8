"""Side-effect operations the faces share: retrying a write proved not applied, and reading
back the exact arguments it was recorded with.

The live tool providers are a parameter (``providers_for``: graph id -> providers): the
composition root knows the deployment's agents and their worlds, this module does not."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from models import PolicyDecisionRecord, SideEffectRecord
from models.errors import ConfigurationError, NotFoundError
from runtime.recorder import RunRecorder
from runtime.side_effects import retry_side_effect
from runtime.tools import ToolCallContext, ToolProvider
from runtime.verification import require_verified
from stores.bundle import Stores
from stores.sql.views import SqlRunViews

#: graph id -> the agent's live tool providers
ProvidersFor = Callable[[str], Awaitable[Mapping[str, ToolProvider]]]


async def recorded_arguments(stores: Stores, record: SideEffectRecord) -> dict[str, Any]:
    """The exact arguments of the recorded action: the policy decision whose input hash is the
    action hash holds them."""
    for sequence, stored in await SqlRunViews(stores.db).policy_decisions(record.run_id):
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
                reason=f"retry of side effect {record.side_effect_id} proved not applied",
            )
            return dict(raw.content["sanitized_input"]["arguments"])
    raise NotFoundError(f"the arguments of side effect {record.side_effect_id} are not recorded")


async def retry_recorded_side_effect(
    stores: Stores, side_effect_id: str, providers_for: ProvidersFor
) -> dict[str, Any]:
    """Retry a write only if it is proved not applied (FAILED, or RECONCILED not applied), with
    its original idempotency key and arguments. An UNKNOWN one raises
    ``ReconciliationRequiredError`` before anything reaches the provider."""
    record: SideEffectRecord = await stores.evidence.record(SideEffectRecord, side_effect_id)
    # the status and arguments read here come from lookup rows: they must be what the chained
    # events say before a provider is called on their word
    await require_verified(stores.ledger, record.run_id, to=f"retry side effect {side_effect_id}")
    run = await stores.ledger.get_run(record.run_id)
    recorder = RunRecorder(stores.ledger, stores.artifacts, record.run_id)
    recorder.step_id = record.step_id
    arguments = await recorded_arguments(stores, record)

    async def call(key: str, preq: str) -> dict:
        providers = await providers_for(run.graph_id)
        context = ToolCallContext(record.run_id, recorder.logical_time(), key, preq)
        return await providers[record.capability_id](arguments, context)

    final, receipt = await retry_side_effect(stores.evidence, recorder, side_effect_id, call)
    return {"side_effect_id": side_effect_id, "status": final.status.value, "receipt": receipt}
