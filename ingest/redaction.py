"""The redaction step of ingestion (rule 17): an ingested run is private like a recorded one.

Its policy is the one its header pins (``pinned.redaction_policy_version``), else the
configured default (``REPLAYBOOK_INGEST_REDACTION``, ``redact-v1`` unless set; ``none``
turns it off), and it is pinned in the run's header so that a replay sanitizes as ingestion
did. Every ledger event is recorded as its sanitized view with its raw bytes sealed in the
vault (``ingest.recorder.IngestRecorder``), and each person a sanitized payload names by
pseudonym (``email:<hex>``, ``phone:<hex>``) becomes a data subject of the run, so that
``privacy delete-subject`` of that address (or of its pseudonym) and retention reach it. A
ledger without a raw-evidence vault records as given.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ingest.recorder import SUBJECT_SOURCE
from models.canonical import canonicalize
from models.digest import sha256_digest
from models.errors import ConfigurationError, InvalidInputError
from models.ingest import IngestRunHeader
from models.model_call import ChatMessage
from models.privacy import RunSubject, SubjectKind
from models.redaction import KNOWN_POLICY_VERSIONS, RedactionPolicy
from runtime.privacy.redaction import recording_redaction


def _vault(ledger: Any) -> Any:
    return getattr(ledger, "vault", None)


def ingest_policy_version(ledger: Any, pinned: str | None) -> str | None:
    """The policy a new ingested run is recorded with (and pins): ``pinned``, else the
    vault's configured default; ``pinned`` when the ledger keeps no raw content."""
    vault = _vault(ledger)
    if pinned is not None and pinned not in KNOWN_POLICY_VERSIONS:
        raise InvalidInputError(
            f"pinned.redaction_policy_version {pinned!r} is not a known policy "
            f"(known: {', '.join(sorted(KNOWN_POLICY_VERSIONS))})",
            field="pinned.redaction_policy_version",
        )
    if vault is None or pinned is not None:
        return pinned
    default = str(vault.ingest_redaction)
    if default not in KNOWN_POLICY_VERSIONS:
        raise ConfigurationError(
            f"REPLAYBOOK_INGEST_REDACTION {default!r} is not a known policy "
            f"(known: {', '.join(sorted(KNOWN_POLICY_VERSIONS))})"
        )
    return default


def ingest_policy(ledger: Any, version: str | None) -> RedactionPolicy | None:
    """The policy an ingested run's events are sanitized with (None: recorded as given)."""
    if _vault(ledger) is None:
        return None
    return recording_redaction(version, ())


async def register_subjects(ledger: Any, run_id: str, subjects: Iterable[str]) -> None:
    """Make each pseudonymous person a subject of ``run_id`` (those known already are kept)."""
    vault = _vault(ledger)
    found = sorted(set(subjects))
    if vault is None or not found:
        return
    await vault.add_subjects(
        run_id,
        [RunSubject(subject_id=s, kind=SubjectKind.PERSON, source=SUBJECT_SOURCE) for s in found],
    )


def sanitized_messages(
    policy: RedactionPolicy,
    messages: Sequence[ChatMessage],
    cache: dict[int, tuple[Any, Any]],
) -> list[ChatMessage]:
    """The sanitized view of a model call's conversation: what its context snapshot stores and
    hashes (the raw words are sealed with the events that brought them: user messages, model
    answers, tool results). ``cache`` keeps each message's view by identity, so a long
    conversation sanitizes only its new messages and the objects stay the same from call to
    call (``runtime.tool_loop.context``'s fast path)."""
    out = []
    for message in messages:
        hit = cache.get(id(message))
        if hit is not None and hit[0] is message:
            out.append(hit[1])
            continue
        dumped = message.model_dump(mode="json")
        clean = policy.sanitize(dumped)
        view = message if clean == dumped else ChatMessage.model_validate(clean)
        cache[id(message)] = (message, view)
        out.append(view)
    if len(cache) > 2 * len(messages) + 64:  # messages sent afresh each call: keep these
        cache.clear()
        cache.update((id(m), (m, v)) for m, v in zip(messages, out, strict=True))
    return out


def sanitized_header(
    header: IngestRunHeader, policy: RedactionPolicy | None
) -> tuple[IngestRunHeader, list[tuple[bytes, str]]]:
    """The header with its system prompt and attachments sanitized (what the artifact store
    gets), and the (raw bytes, sanitized digest) of each that changed (``seal_raw_forms``)."""
    if policy is None:
        return header, []
    raw_forms: list[tuple[bytes, str]] = []
    prompt = header.system_prompt
    if prompt is not None and (clean := policy.sanitize(prompt)) != prompt:
        raw_forms.append((prompt.encode(), sha256_digest(clean.encode())))
        prompt = clean
    attachments = {}
    for name, value in header.attachments.items():
        view = policy.sanitize(value)
        if view != value:
            raw_forms.append((canonicalize(value), sha256_digest(canonicalize(view))))
        attachments[name] = view
    if not raw_forms:
        return header, []
    return header.model_copy(
        update={"system_prompt": prompt, "attachments": attachments}
    ), raw_forms


async def seal_raw_forms(
    ledger: Any, run_id: str, raw_forms: list[tuple[bytes, str]], policy: RedactionPolicy | None
) -> None:
    """Keep the raw forms of sanitized header artifacts encrypted under the run's key."""
    vault = _vault(ledger)
    if vault is not None and policy is not None and raw_forms:
        await vault.record_artifact_raws(run_id, raw_forms, policy.version, None)
