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

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    """The policy an ingested run's events are sanitized with (None: recorded as given):
    one object per version for the process, so what it sanitized for a batch is remembered
    for the next ones (``RedactionPolicy._memo``, bounded: the model's answer of one batch
    is the conversation of the next), where a policy made per batch started empty."""
    if _vault(ledger) is None:
        return None
    policy = _POLICIES.get(version)
    if policy is None and version not in _POLICIES:
        policy = _POLICIES[version] = recording_redaction(version, ())
    return policy


#: the ingestion policy of each version (no personal fields, no names: the same for every
#: run, so shared)
_POLICIES: dict[str | None, RedactionPolicy | None] = {}


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


@dataclass
class SanitizedViews:
    """A conversation's messages as the last model call saw them, and their sanitized views
    (``sanitized_messages``)."""

    sources: list[ChatMessage] = field(default_factory=list)
    views: list[ChatMessage] = field(default_factory=list)


def sanitized_messages(
    policy: RedactionPolicy, messages: Sequence[ChatMessage], known: SanitizedViews
) -> list[ChatMessage]:
    """The sanitized view of a model call's conversation: what its context snapshot stores and
    hashes (the raw words are sealed with the events that brought them: user messages, model
    answers, tool results). A conversation only grows: when it starts with the very messages
    of the last call (checked by identity at C speed) only the messages after them are
    sanitized, so a call costs its new messages, not the conversation (at 2,000 messages a
    loop over every one cost 3 ms a batch); the views stay the same objects from call to
    call (``runtime.tool_loop.context``'s fast path)."""
    seen = len(known.sources)
    if seen <= len(messages) and all(map(operator.is_, known.sources, messages)):
        for message in messages[seen:]:
            known.sources.append(message)
            known.views.append(_sanitized_message(policy, message))
        return list(known.views)
    # another conversation (messages sent afresh with each call): the views of the messages
    # that are the last call's objects are kept, the others made
    previous = {id(s): (s, v) for s, v in zip(known.sources, known.views, strict=True)}
    out = []
    for message in messages:
        hit = previous.get(id(message))
        out.append(
            hit[1] if hit is not None and hit[0] is message else _sanitized_message(policy, message)
        )
    known.sources, known.views = list(messages), out
    return list(out)


def _sanitized_message(policy: RedactionPolicy, message: ChatMessage) -> ChatMessage:
    dumped = message.model_dump(mode="json")
    clean = policy.sanitize(dumped)
    return message if clean == dumped else ChatMessage.model_validate(clean)


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
