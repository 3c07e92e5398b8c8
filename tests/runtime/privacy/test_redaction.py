"""The versioned redaction policy (pure)."""

from __future__ import annotations

import re

import pytest

from models.canonical import canonical_hash
from models.redaction import (
    REDACT_V1,
    REDACT_V2,
    RedactionPolicy,
    luhn_valid,
    name_words,
    redaction_policy,
)

POLICY = redaction_policy(REDACT_V1, ["phone", "to"])


def test_emails_phones_cards_keys_are_replaced_by_tokens() -> None:
    raw = {
        "text": "mail ada@example.com or call +1-555-0100 / (555) 123-4567, card 4111 1111 1111 1111",
        "auth": "Bearer abcdefghijklmnop.qrs",
        "note": "key sk-abcdefghijklmnopqrstuvwx",
    }
    out = POLICY.sanitize(raw)
    text = out["text"]
    for secret in ("ada@example.com", "555-0100", "123-4567", "4111 1111 1111 1111"):
        assert secret not in text
    assert "<email:" in text and "<phone:" in text and "<card:" in text
    assert out["auth"].startswith("<secret:") and "sk-" not in out["note"]


def test_card_numbers_need_the_luhn_check() -> None:
    assert luhn_valid("4111111111111111") and not luhn_valid("4111111111111112")
    assert POLICY.sanitize("n 4111111111111112") == "n 4111111111111112"


def test_dates_digests_ids_and_amounts_are_left_alone() -> None:
    value = {
        "at": "2026-08-01T10:00:00.000000Z",
        "hash": "sha256:" + "0123456789" * 6 + "abcd",
        "order_id": "O-1001-ab12cd",
        "amount": 120.5,
        "prompt_tokens": 1234567890123,
    }
    assert POLICY.sanitize(value) == value


def test_personal_and_secret_fields_are_replaced_whole() -> None:
    out = POLICY.sanitize({"phone": "+1-555-0199", "to": "Bob Smith", "password": "hunter2"})
    assert out["phone"].startswith("<phone:")
    assert out["to"].startswith("<personal:")
    assert out["password"].startswith("<secret:")


def test_same_version_same_input_same_sanitized_hash_and_idempotent() -> None:
    raw = {"to": "bob@example.com", "body": "call +1-555-0199", "list": ["carol@example.com"]}
    first = POLICY.sanitize(raw)
    again = redaction_policy(REDACT_V1, ["to", "phone"]).sanitize(raw)
    assert canonical_hash(first) == canonical_hash(again)
    # sanitizing the sanitized view changes nothing: raw and sanitized inputs hash the same
    assert POLICY.sanitize(first) == first
    # the same value maps to the same token wherever it appears; a personal field that is an
    # e-mail keeps the e-mail token
    assert first["to"] == POLICY.sanitize("bob@example.com")
    assert first["to"] != first["list"][0]


def test_identity_and_unknown_versions() -> None:
    assert redaction_policy(None).sanitize({"a": "x@y.com"}) == {"a": "x@y.com"}
    with pytest.raises(ValueError, match="unknown redaction policy version"):
        RedactionPolicy("redact-v999")


V2 = redaction_policy(REDACT_V2, ["phone", "to"], ["Carol Chen", "Anne-Marie O'Neil"])


def test_v2_redacts_every_word_of_a_known_name_wherever_it_appears() -> None:
    raw = {
        "customers": [{"customer_id": "C-2002", "name": "Carol Chen"}],
        "body": "Hello Carol,\nCAROL CHEN asked; Anne-Marie and Anne too. Carolyn is someone else.",
    }
    out = V2.sanitize(raw)
    text = str(out)
    for word in ("Carol", "CAROL", "Chen", "CHEN", "Anne"):
        assert re.search(rf"\b{word}\b", text) is None, word
    assert "Carolyn" in out["body"]  # a whole word only
    carol = V2.sanitize("Carol")
    assert carol.startswith("<name:") and out["body"].startswith(f"Hello {carol},")
    assert out["customers"][0]["name"] == f"{carol} {V2.sanitize('Chen')}"
    assert out["customers"][0]["customer_id"] == "C-2002"
    assert V2.sanitize(out) == out  # idempotent


def test_v2_keeps_v1_tokens_and_v1_ignores_names() -> None:
    assert V2.sanitize("bob@example.com") == POLICY.sanitize("bob@example.com")
    v1 = redaction_policy(REDACT_V1, [], ["Carol Chen"])
    assert v1.sanitize("Hello Carol") == "Hello Carol" and not v1.names


def test_names_read_back_from_sanitized_evidence_teach_nothing() -> None:
    sanitized = V2.sanitize("Carol Chen")
    assert name_words(sanitized) == set()
    assert redaction_policy(REDACT_V2, [], [sanitized]).names == frozenset()
    assert name_words("Anne-Marie O'Neil X") >= {"anne-marie", "anne", "marie", "o'neil", "neil"}
    assert "x" not in name_words("Anne-Marie O'Neil X")  # initials are not redacted alone


def test_texts_sanitized_before_new_names_are_reused_only_where_no_new_name_occurs() -> None:
    """``with_names`` keeps the sanitized texts in which no new word occurs (in any case,
    anywhere); every text sanitizes as a policy that knew all the names from the start."""
    texts = [
        "Hello Carol, your order O-1001 is on its way",
        "Write to carol.chen@example.com or call +1 555 123 4567",
        "sha256:" + "ab" * 32,
        "Élise wrote from x@y.comélise about CHEN",  # new words next to a token, other case
        "Dear Dana Chen-Okafor",
        "nothing personal here",
    ]
    first = RedactionPolicy(REDACT_V2).with_names(["Dana"])
    before = [first.sanitize(t) for t in texts]
    learned = first.with_names(["Carol Chen", "Élise"])
    assert set(learned._memo) == {"sha256:" + "ab" * 32, "nothing personal here"}
    fresh = RedactionPolicy(REDACT_V2, names=learned.names)
    after = [learned.sanitize(t) for t in texts]
    assert after == [fresh.sanitize(t) for t in texts]
    assert before[4] != after[4] and "Chen" not in after[4]  # learned after it was sanitized
    assert before[3] != after[3] and "lise" not in after[3]
    # what is carried over is not sanitized again
    learned._memo["nothing personal here"] = "carried"
    assert learned.sanitize("nothing personal here") == "carried"


def _reference_text(policy: RedactionPolicy, text: str) -> str:
    """Sanitizing as every rule is applied to every piece of text, no shortcut taken."""
    import models.redaction as r

    def plain(piece: str) -> str:
        piece = r._SECRET.sub(lambda m: policy._token("secret", m.group(0)), piece)
        piece = r._EMAIL.sub(lambda m: policy._token("email", m.group(0).lower()), piece)
        piece = r._CARD.sub(policy._card, piece)
        piece = r._PHONE.sub(policy._phone, piece)
        if not policy.names:
            return piece
        pattern = r._names_pattern(policy.names)
        pieces, tokens = r._TOKEN.split(piece), r._TOKEN.findall(piece)
        out = [pattern.sub(policy._name, pieces[0])]
        for token, rest in zip(tokens, pieces[1:], strict=True):
            out += [token, pattern.sub(policy._name, rest)]
        return "".join(out)

    pieces, tokens = r._TOKEN.split(text), r._TOKEN.findall(text)
    out = [plain(pieces[0])]
    for token, rest in zip(tokens, pieces[1:], strict=True):
        out += [token, plain(rest)]
    return "".join(out)


def test_the_shortcuts_sanitize_as_every_rule_applied_everywhere() -> None:
    """Texts without "@", without a digit, without a token, and digests skip rules that cannot
    match them: the same result as applying every rule (random texts of the rules' pieces)."""
    import random

    rng = random.Random(21)
    pieces = [
        "carol", "Chen", "sha256:", "ab" * 32, "0123456789abcdef" * 4, "@", "x@y.io", "+1 555",
        " 010 0000", "4111 1111 1111 1111", "sk-", "A" * 16, "Bearer ", "<name:0123456789abcdef>",
        "<email:", "-", ":", " ", "é", "5", "Dana", "(555) 123-4567", "bo@ab.io", "ab.io",
    ]  # fmt: skip
    policy = RedactionPolicy(REDACT_V2).with_names(["Carol Chen", "Dana"])
    texts = ["sha256:" + "a" * 64, "sha256:" + "0" * 64, "sha256:" + "ab" * 32]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(3000)]
    for text in texts:
        assert policy._text_uncached(text) == _reference_text(policy, text), text
        fresh = RedactionPolicy(REDACT_V2, names=policy.names)
        assert fresh.sanitize(text) == _reference_text(policy, text), text
    digest = "sha256:" + "0123456789abcdef" * 4
    assert RedactionPolicy(REDACT_V2).with_names(["Carol"]).sanitize(digest) == digest
    assert digest not in policy._memo  # digests are not remembered
    # a "digest" of letters only is a word: a name it is redacted as
    letters = "sha256:" + "ab" * 32
    named = RedactionPolicy(REDACT_V2).with_names(["ab" * 32])
    assert named.sanitize(letters) == _reference_text(named, letters) != letters
