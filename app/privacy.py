"""Privacy operations (rule 17): evidence reads (sanitized, or raw with a reason and audited),
the audit log, retention sweep, legal holds and their release, deletion of a data subject.
The rules live in ``runtime.privacy``; these functions are what the CLI and the API call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from models.errors import ConfigurationError, InvalidInputError
from models.privacy import FORENSIC_ROLE, NO_SUBJECT

#: the largest event sequence (a signed 64-bit column)
MAX_SEQUENCE = 2**63 - 1

if TYPE_CHECKING:
    from runtime.privacy.service import PrivacyService
    from stores.bundle import Stores


def _service(stores: Stores) -> PrivacyService:
    if stores.privacy is None:
        raise ConfigurationError("privacy operations need the raw-evidence vault")
    return stores.privacy


def parse_until(text: str | None, field: str = "--until") -> datetime | None:
    """An ISO date or date-time (UTC when no zone is given), or ``None``."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInputError(
            f"{field} {text!r} is not an ISO date (YYYY-MM-DD)", field=field
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


async def read_evidence(
    stores: Stores,
    run_id: str,
    sequence: int,
    *,
    raw: bool = False,
    actor: str = "",
    reason: str = "",
    role: str = FORENSIC_ROLE,
) -> dict[str, Any]:
    """One event's payload: the sanitized view, or the raw one (the caller has checked that a
    reason is given; the privacy service audits every raw attempt, refused ones too)."""
    from runtime.privacy.views import evidence_view

    if not 1 <= sequence <= MAX_SEQUENCE:  # past it no database column holds it
        raise InvalidInputError(
            f"sequence must be from 1 to {MAX_SEQUENCE}, not {sequence}", field="sequence"
        )
    return await evidence_view(
        stores.ledger,
        stores.privacy,
        run_id,
        sequence,
        raw=raw,
        actor=actor,
        reason=reason,
        role=role,
    )


async def audit_log(stores: Stores) -> list[dict[str, Any]]:
    """Every access to raw evidence: who, when, what, why, outcome."""
    return [r.model_dump(mode="json") for r in await _service(stores).records.audits()]


async def sweep(stores: Stores) -> dict[str, Any]:
    """Destroy the raw content of runs past their retention class (held runs are kept)."""
    return await _service(stores).sweep()


async def hold(stores: Stores, run_id: str, reason: str, until: datetime | None) -> dict[str, Any]:
    """Put a run's evidence on legal hold (and its objects, where the store enforces holds)."""
    placed, objects = await _service(stores).hold(run_id, reason, until=until)
    return {
        **placed.model_dump(mode="json"),
        "objects_held": objects,
        "enforced_by_store": stores.artifacts.enforced_by_backend(),
    }


async def release(
    stores: Stores, run_id: str, incident_id: str | None, *, by: str = "cli", reason: str = ""
) -> dict[str, Any]:
    """Release a run's legal holds, and the freeze of ``incident_id`` when named (chained:
    ``by``, ``reason``)."""
    privacy = _service(stores)
    freezes = (
        await privacy.release_freeze(run_id, incident_id, by=by, reason=reason)
        if incident_id
        else []
    )
    released = await privacy.release(run_id, by=by, reason=reason)
    return {
        "released": [h.model_dump(mode="json") for h in released],
        "released_freezes": freezes,
        "still_held": await privacy.hold_reasons(run_id),
    }


async def delete_subject(stores: Stores, subject_id: str, request_id: str, by: str = "") -> Any:
    """Crypto-shred a data subject; refused naming the hold when any of their runs is held.
    ``by``: who asked (chained with each run's destruction). An e-mail address or a phone
    number given in clear names the pseudonymous subject ingestion registered for it (the
    receipt names the pseudonym, never the address)."""
    from models.redaction import address_subject

    if subject_id.strip() == NO_SUBJECT:
        raise InvalidInputError(
            f"subject {NO_SUBJECT} names raw content sealed for no declared subject (every "
            "such run), not a person: delete the person's subject id or address",
            field="subject_id",
        )
    subject_id = address_subject(subject_id) or subject_id
    return await _service(stores).delete_subject(subject_id, request_id, by=by)
