"""Which redaction policy a run is recorded and replayed with."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from models import RunRecord
from models.base import format_instant
from models.capability import Capability
from models.privacy import RunSubject
from models.redaction import NO_REDACTION, RedactionPolicy, redaction_policy
from runtime.ports import NewEvent, subject_vault


def personal_fields(capabilities: Iterable[Capability]) -> frozenset[str]:
    """Every argument name a capability of the registry declares personal."""
    return frozenset(name for c in capabilities for name in c.personal_fields)


def replay_redaction(run: RunRecord, capabilities: Iterable[Capability]) -> RedactionPolicy | None:
    """The source run's policy (None for runs recorded as given): a replay hashes lookups and
    sanitizes new payloads exactly as the source did."""
    version = run.pinned.redaction_policy_version
    if version in (None, NO_REDACTION):
        return None
    return redaction_policy(version, personal_fields(capabilities))


async def destroyed_content_note(ledger: object, run_id: str) -> str | None:
    """Why a replay of ``run_id`` is LIMITED when a deletion request destroyed raw content of
    it; None when nothing was destroyed (or the ledger keeps no raw content)."""
    vault = subject_vault(ledger)
    if vault is None:
        return None
    count, request_id, at = await vault.destroyed_summary(run_id)
    if not count:
        return None
    return (
        f"raw content of {count} payload(s) destroyed by deletion request {request_id} at "
        f"{format_instant(at) if at else '?'}: replayed from the sanitized view only"
    )


def recording_redaction(
    version: str | None, capabilities: Iterable[Capability]
) -> RedactionPolicy | None:
    """The policy a new recording applies (None: record as given, the ``none`` version)."""
    if version in (None, NO_REDACTION):
        return None
    return redaction_policy(version, personal_fields(capabilities))


async def start_run(
    ledger: Any,
    run: RunRecord,
    events: Sequence[NewEvent],
    policy: RedactionPolicy | None,
    subjects: Sequence[RunSubject] = (),
) -> bool:
    """``ledger.start_run``; when the run's raw content is to be sealed (a policy, and a
    ledger that can), with the run's data key made in the start's transaction (``run_key``):
    not by a read and a transaction of its own at the first seal — on PostgreSQL several
    round trips on the event loop, run after run, while the run's first step goes on.
    ``subjects`` (only for a ledger that ``starts_with_run_key``: it takes them too): the
    run's data subjects, registered in the same transaction, or after it when the run was
    there already."""
    keywords: dict[str, Any] = {"subjects": subjects} if subjects else {}
    if policy is not None and getattr(ledger, "starts_with_run_key", False):
        keywords["run_key"] = True
    started = bool(await ledger.start_run(run, events, **keywords))
    if subjects and not started:  # there already: its subjects as an add would register them
        await ledger.vault.add_subjects(run.run_id, subjects)
    return started
