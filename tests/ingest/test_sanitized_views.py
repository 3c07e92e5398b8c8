"""The sanitized view of a model call's conversation (``ingest.redaction.sanitized_messages``):
a growing conversation is sanitized message by message as it grows (the views of the known
messages are the same objects from call to call), and a conversation sent afresh is
sanitized as a whole; either way each view is the message's sanitized form."""

from __future__ import annotations

from ingest.redaction import SanitizedViews, sanitized_messages
from models.model_call import ChatMessage
from models.redaction import redaction_policy

POLICY = redaction_policy("redact-v1", ())


def _expected(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [
        ChatMessage.model_validate(POLICY.sanitize(m.model_dump(mode="json"))) for m in messages
    ]


def test_a_growing_conversation_keeps_its_views() -> None:
    known = SanitizedViews()
    conversation = [ChatMessage(role="user", content="write to ada.lovelace@example.com")]
    first = sanitized_messages(POLICY, conversation, known)
    assert first == _expected(conversation)
    assert "ada.lovelace" not in (first[0].content or "")
    conversation.append(ChatMessage(role="assistant", content="done, nothing personal"))
    conversation.append(ChatMessage(role="user", content="call +49 151 2345 6789 instead"))
    second = sanitized_messages(POLICY, conversation, known)
    assert second == _expected(conversation)
    assert second[0] is first[0]  # known messages: their views again, not made anew
    assert second[1] is conversation[1]  # nothing to redact: the message itself
    assert "2345" not in (second[2].content or "")


def test_a_conversation_sent_afresh_is_sanitized_whole() -> None:
    known = SanitizedViews()
    sanitized_messages(POLICY, [ChatMessage(role="user", content="hello")], known)
    other = [
        ChatMessage(role="user", content="mail grace.hopper@example.org"),
        ChatMessage(role="assistant", content="ok"),
    ]
    assert sanitized_messages(POLICY, other, known) == _expected(other)
    shorter = other[:1]
    assert sanitized_messages(POLICY, shorter, known) == _expected(shorter)
