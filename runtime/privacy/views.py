"""One recorded event's payload as the CLI (``evidence show``) and the API
(``/api/runs/{run_id}/events/{sequence}[/raw]``) show it: the sanitized view by default, the
raw one through ``PrivacyService.read_raw_evidence`` (role and reason checked, audited)."""

from __future__ import annotations

import json
from typing import Any

from models.errors import InvalidInputError
from models.privacy import FORENSIC_ROLE, RawEvidenceState
from runtime.ports import EventLedger


async def evidence_view(
    ledger: EventLedger,
    privacy: Any,
    run_id: str,
    sequence: int,
    *,
    raw: bool = False,
    actor: str = "",
    reason: str = "",
    role: str = FORENSIC_ROLE,
) -> dict[str, Any]:
    """``privacy`` is a ``runtime.privacy.service.PrivacyService``. Raises ``RunNotFoundError``
    for an unknown run, ``InvalidInputError`` for a sequence the run does not have, and for a
    raw read whatever ``read_raw_evidence`` raises (refused, content destroyed)."""
    events = await ledger.events(run_id, from_sequence=sequence)
    if not events or events[0].sequence != sequence:
        await ledger.get_run(run_id)
        raise InvalidInputError(f"run {run_id} has no event at sequence {sequence}")
    event = events[0]
    meta = await privacy.vault.raw_evidence(run_id, sequence, decrypt=False)
    if raw:
        evidence = await privacy.read_raw_evidence(
            run_id, sequence, actor=actor, reason=reason, role=role
        )
        content, view = evidence.content, "raw"
    else:
        content, view = json.loads(await ledger.payload(event)), "sanitized"
    out: dict[str, Any] = {
        "run_id": run_id,
        "sequence": sequence,
        "type": str(event.type),
        "view": view,
        "sanitized_hash": event.payload_hash,
        "raw_hash": meta.raw_hash,
        "redaction_policy_version": meta.redaction_policy_version,
        "raw_state": meta.state.value,
        "payload": content,
    }
    if meta.state is RawEvidenceState.DESTROYED:
        out["raw_destroyed"] = meta.destroyed_message()
    return out
