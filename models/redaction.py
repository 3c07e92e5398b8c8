"""The versioned redaction policy (rule 17): the sanitized view of every recorded payload.

A policy version is a pure function of (raw JSON, personal field names): re-applying the same
version to the same raw input always gives the same sanitized JSON, hence the same sanitized
hash. Versions are never changed once released; a new rule is a new version.

``redact-v1`` replaces, inside every string:

- e-mail addresses,
- phone numbers (international ``+…`` numbers with at least 7 digits, and ``(555) 123-4567`` /
  ``555-123-4567`` forms; ISO dates never match),
- payment card numbers (13–19 digits, spaces or dashes allowed) that pass the Luhn check,
- API keys and bearer tokens (``Bearer …``, ``sk-…``, ``ghp_…``, ``xox?-…``, ``AKIA…``),

and the whole value of any object key that is a secret name (``api_key``, ``authorization``,
``password``…) or a personal field declared by the capability registry
(``Capability.personal_fields``, e.g. ``phone``, ``to``).

Each match becomes a pseudonym ``<kind:16 hex>`` derived from the policy version and the
value, so the same value always maps to the same token and different values (almost surely)
to different tokens: a sanitized view still shows that two records name the same customer,
and hashes over sanitized views are as discriminating as hashes over raw ones. Tokens are
never matched again, so sanitizing is idempotent (``sanitize(sanitize(x)) == sanitize(x)``):
this is what lets fixture matching hash the sanitized request and match whether replay sees
raw or sanitized input. The pseudonym is an unkeyed hash: a low-entropy value (a phone
number) can be found from its token by trying every number, so the sanitized view is
pseudonymous, not anonymous; raw content itself is only ever stored encrypted.

``redact-v2`` is ``redact-v1`` plus the names of people: every word of a name the run's
providers gave it (``Capability.name_fields`` of the records a run read, e.g. the CRM's
``name``) becomes ``<name:16 hex>`` wherever it appears later in the run — in the record
itself, the model's reply ("Hello <name:…>"), an e-mail body. The policy is then a pure
function of (raw JSON, personal field names, known names); the recorder learns the names as
the run reads them (``RunRecorder.learn``). Its other pseudonyms are those of ``redact-v1``
(same value, same token across both versions).

``none`` is the identity (runs recorded before redaction existed).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from models.canonical import canonical_hash

NO_REDACTION = "none"
REDACT_V1 = "redact-v1"
REDACT_V2 = "redact-v2"
DEFAULT_REDACTION_POLICY = REDACT_V1
#: versions that redact the names a run learns from its providers
NAME_POLICY_VERSIONS = frozenset({REDACT_V2})
#: the salt of the pseudonyms: v2 keeps v1's tokens so "same customer" compares across them
_TOKEN_SALT = {REDACT_V1: REDACT_V1, REDACT_V2: REDACT_V1}
#: a word of a name shorter than this is not redacted alone (initials would hit every text)
MIN_NAME_WORD = 2

#: a token produced by a policy: never redacted again
_TOKEN = re.compile(r"<(?:email|phone|card|secret|personal|name):[0-9a-f]{16}>")
#: the same in canonical JSON bytes (a sanitized payload as stored)
_TOKEN_BYTES = re.compile(rb"<(?:email|phone|card|secret|personal|name):[0-9a-f]{16}>")
_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)
_PHONE = re.compile(
    r"(?<![\w+])\+\d[\d ().-]{5,20}\d(?![\w])"
    r"|(?<![\w-])(?:\(\d{3}\)\s?|\d{3}[-. ])\d{3}[-. ]\d{4}(?![\w-])"
)
_CARD = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,18}(?![\w-])")
_DIGIT = re.compile(r"\d")
#: a sha256 digest with a digit in it: no rule changes it (no "@", "+", "<", separator or
#: upper case; the only place a match may start is after the colon, where a card number would
#: have to end the text within 19 digits and a name would have to be the 64 hex characters,
#: and a name is letters only)
_DIGEST = re.compile(r"sha256:(?=[a-f]*[0-9])[0-9a-f]{64}")
_DIGEST_LENGTH = 71
_SECRET = re.compile(
    r"\bBearer\s+[A-Za-z0-9._~+/=-]{8,}"
    r"|\bsk-[A-Za-z0-9_-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
)
SECRET_FIELD_NAMES = frozenset(
    {
        "api_key",
        "apikey",
        "x-api-key",
        "authorization",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "access_token",
        "refresh_token",
        "bearer_token",
    }
)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a digit string (payment card numbers pass it)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


@dataclass(frozen=True)
class RedactionPolicy:
    """One version of the policy plus the personal field names of the run's capabilities."""

    version: str = DEFAULT_REDACTION_POLICY
    personal_fields: frozenset[str] = field(default_factory=frozenset)
    #: words of people's names known to the run (lower case); only ``redact-v2`` uses them
    names: frozenset[str] = field(default_factory=frozenset)
    #: sanitized texts already made by this policy: a run sanitizes the same texts again and
    #: again (its system prompt at every model call, ids and names in every record). Kept
    #: with the policy, so raw text is not held past the run that uses it.
    _memo: dict[str, str] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    #: what each field name seen makes of its value: "secret", "personal" or "" (nothing):
    #: payloads repeat the same few keys, each classified once (bounded like ``_memo``)
    _key_kinds: dict[str, str] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.version not in KNOWN_POLICY_VERSIONS:
            raise ValueError(
                f"unknown redaction policy version {self.version!r} "
                f"(known: {', '.join(sorted(KNOWN_POLICY_VERSIONS))})"
            )

    @property
    def is_identity(self) -> bool:
        return self.version == NO_REDACTION

    @property
    def redacts_names(self) -> bool:
        return self.version in NAME_POLICY_VERSIONS

    def with_names(self, names: Iterable[str]) -> RedactionPolicy:
        """This policy knowing ``names`` too (each split into words); itself when nothing is
        new or the version does not redact names."""
        if not self.redacts_names:
            return self
        words = {w for n in names for w in name_words(n)} - self.names
        if not words:
            return self
        policy = RedactionPolicy(self.version, self.personal_fields, self.names | words)
        if self._memo:
            # a text in which no new word occurs, in any case, anywhere (not even across what
            # the other rules replace: what they leave is pieces of the text) is sanitized by
            # the new policy as by this one: the names pattern's new alternatives match nowhere
            anywhere = _anywhere_pattern(frozenset(words))
            policy._memo.update(
                (text, sanitized)
                for text, sanitized in self._memo.items()
                if anywhere.search(text) is None
            )
        return policy

    def sanitize(self, value: Any) -> Any:
        """The sanitized view of a JSON value (a new value; the input is not changed)."""
        if self.is_identity:
            return value
        return self._value(value, None)

    def _token(self, kind: str, value: Any) -> str:
        text = value if isinstance(value, str) else canonical_hash(value)
        salt = _TOKEN_SALT.get(self.version, self.version)
        digest = hashlib.sha256(f"{salt}\x00{kind}\x00{text}".encode()).hexdigest()
        return f"<{kind}:{digest[:16]}>"

    def _value(self, value: Any, key: str | None) -> Any:
        if key is not None and value is not None:
            kind = self._key_kind(key)
            if kind:
                return self._whole(value, kind)
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return self._object(value)
        if isinstance(value, list | tuple):
            return [self._value(v, None) for v in value]
        return value

    def _object(self, value: dict[str, Any]) -> dict[str, Any]:
        """``_value`` of an object: each member as ``_value(item, key)`` does, the key
        classified once per policy and a text member sanitized without the call."""
        out = {}
        kinds = self._key_kinds
        for k, v in value.items():
            kind = kinds.get(k)
            if kind is None:
                kind = self._key_kind(k)
            if kind and v is not None:
                out[k] = self._whole(v, kind)
            elif type(v) is str:
                out[k] = self._text(v)
            else:
                out[k] = self._value(v, None)  # the key is judged: nothing to make of it
        return out

    def _key_kind(self, key: str) -> str:
        kind = self._key_kinds.get(key)
        if kind is None:
            if key.lower() in SECRET_FIELD_NAMES:
                kind = "secret"
            elif key in self.personal_fields:
                kind = "personal"
            else:
                kind = ""
            if len(self._key_kinds) >= _MEMO_ENTRIES:
                self._key_kinds.clear()
            self._key_kinds[key] = kind
        return kind

    def _whole(self, value: Any, kind: str) -> Any:
        if isinstance(value, str) and _TOKEN.fullmatch(value):
            return value
        if isinstance(value, dict | list | tuple):
            # a personal object: every scalar inside is personal
            if isinstance(value, dict):
                return {k: self._whole(v, kind) for k, v in value.items()}
            return [self._whole(v, kind) for v in value]
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            # keep the more specific kind when the whole value is an e-mail or a phone number
            sanitized = self._text(value)
            if _TOKEN.fullmatch(sanitized):
                return sanitized
        return self._token(kind, value)

    def _text(self, text: str) -> str:
        sanitized = self._memo.get(text)
        if sanitized is None:
            if len(text) == _DIGEST_LENGTH and _DIGEST.fullmatch(text):
                return text  # a digest (each one new: not remembered)
            sanitized = self._text_uncached(text)
            if len(text) <= _MEMO_TEXT_LIMIT:
                if len(self._memo) >= _MEMO_ENTRIES:
                    self._memo.clear()
                self._memo[text] = sanitized
        return sanitized

    def _text_uncached(self, text: str) -> str:
        if "<" not in text:  # no token in it
            return self._plain(text)
        parts = _TOKEN.split(text)
        tokens = _TOKEN.findall(text)
        out = [self._plain(parts[0])]
        for token, part in zip(tokens, parts[1:], strict=True):
            out += [token, self._plain(part)]
        return "".join(out)

    def _plain(self, text: str) -> str:
        text = _SECRET.sub(lambda m: self._token("secret", m.group(0)), text)
        # each rule skipped only where it cannot match: no "@", no digit (in the text as the
        # rules before have left it)
        if "@" in text:
            text = _EMAIL.sub(lambda m: self._token("email", m.group(0).lower()), text)
        if _DIGIT.search(text) is not None:
            text = _CARD.sub(self._card, text)
            text = _PHONE.sub(self._phone, text)
        return self._names(text) if self.names else text

    def _names(self, text: str) -> str:
        # the tokens just made are left alone: a name word never matches inside a token
        pattern = _names_pattern(self.names)
        if "<" not in text:
            return pattern.sub(self._name, text)
        parts = _TOKEN.split(text)
        tokens = _TOKEN.findall(text)
        out = [pattern.sub(self._name, parts[0])]
        for token, part in zip(tokens, parts[1:], strict=True):
            out += [token, pattern.sub(self._name, part)]
        return "".join(out)

    def _name(self, match: re.Match[str]) -> str:
        return self._token("name", match.group(0).lower())

    def _card(self, match: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            return self._token("card", digits)
        return match.group(0)

    def _phone(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        digits = re.sub(r"\D", "", raw)
        if len(digits) < 7:
            return raw
        return self._token("phone", ("+" if raw.startswith("+") else "") + digits)


KNOWN_POLICY_VERSIONS = frozenset({NO_REDACTION, REDACT_V1, REDACT_V2})

#: texts up to this length have their sanitized form remembered (``RedactionPolicy._memo``),
#: at most this many of them
_MEMO_TEXT_LIMIT = 4096
_MEMO_ENTRIES = 4096


_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")


def name_words(name: str) -> set[str]:
    """The words of a person's name, lower case ("Carol Chen" -> {"carol", "chen"}); a name
    already redacted (read back from sanitized evidence) has none."""
    plain = _TOKEN.sub(" ", name)
    words = set(_WORD.findall(plain))
    words |= {part for w in words for part in re.split(r"['’-]", w)}  # "Anne-Marie": "Anne"
    return {w.lower() for w in words if len(w) >= MIN_NAME_WORD}


@lru_cache(maxsize=256)
def _names_pattern(names: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


@lru_cache(maxsize=256)
def _anywhere_pattern(words: frozenset[str]) -> re.Pattern[str]:
    """``words`` anywhere in a text, as the names pattern matches them (case), boundaries or not."""
    return re.compile("|".join(re.escape(w) for w in sorted(words)), re.IGNORECASE)


def redaction_policy(
    version: str | None, personal_fields: Iterable[str] = (), names: Iterable[str] = ()
) -> RedactionPolicy:
    """The policy a run pinned (``None``: recorded before redaction existed, the identity)."""
    return RedactionPolicy(version or NO_REDACTION, frozenset(personal_fields)).with_names(names)


Sanitizer = Callable[[Any], Any]


def has_redaction_token(data: bytes | memoryview) -> bool:
    """Whether a stored payload holds a pseudonym a policy wrote: its raw form differed, so a
    raw-payload row (ciphertext, or a recorded destruction) must exist beside it."""
    return _TOKEN_BYTES.search(data) is not None


#: the pseudonyms that name a person: each is a data subject of the run that holds it
_PERSON_TOKEN_BYTES = re.compile(rb"<((?:email|phone):[0-9a-f]{16})>")


def pseudonym_subjects(data: bytes) -> set[str]:
    """The data subjects a sanitized payload names by pseudonym: ``email:<16 hex>``,
    ``phone:<16 hex>`` (the token without its brackets: no address is kept in clear)."""
    return {m.decode() for m in _PERSON_TOKEN_BYTES.findall(data)}


def address_subject(value: str) -> str | None:
    """The subject id of an e-mail address or a phone number given in clear (what
    ``pseudonym_subjects`` registered for it), or None when ``value`` is neither. The
    subject-id prefix may come with it (``email:ada@example.com``, ``phone:+1 555 0100``)."""
    value = value.strip()
    kind, _, rest = value.partition(":")
    if kind in ("email", "phone") and rest.strip():
        value = rest.strip()  # ``email:<hex>``, a pseudonym already, sanitizes to no token
    token = RedactionPolicy(REDACT_V1).sanitize(value)
    match = _PERSON_TOKEN_BYTES.fullmatch(token.encode()) if isinstance(token, str) else None
    return match.group(1).decode() if match else None
