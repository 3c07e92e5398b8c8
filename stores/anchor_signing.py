"""The Ed25519 key that signs anchor entries, and the public key that checks them.

Configured like the key-encryption key (``stores.encryption``), never kept in the database, the
artifact store or the anchor location:

1. ``REPLAYBOOK_ANCHOR_SIGNING_KEY``: a file holding the private key (PEM, PKCS#8);
2. development only: ``$REPLAYBOOK_HOME/anchor-signing.key``, generated (mode 0600) on first use.

Entries are checked with ``REPLAYBOOK_ANCHOR_PUBLIC_KEY`` when set, else with the signing key's
public half; a process given the public key and no signing key checks anchors and writes none
(a replay worker that holds no secret: the runs it finishes are anchored later, by ``anchors
write`` or when an incident freezes them). ``replaybook anchors
public-key -o FILE`` exports it for ``anchors verify --public-key FILE`` on a copy of the log.
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from models.anchor import Anchor, AnchorEntry, anchor_entry, signed_bytes
from models.errors import ConfigurationError
from stores.case_signing import (
    CaseSigningKey,
    load_public_key,
    load_signing_key,
    public_key_id,
    verify_signature,
)
from stores.config import AnchorSettings

__all__ = ["ANCHOR_KEY_VARIABLE", "AnchorKeys", "load_anchor_keys"]

ANCHOR_KEY_FILE_NAME = "anchor-signing.key"
ANCHOR_KEY_VARIABLE = "REPLAYBOOK_ANCHOR_SIGNING_KEY"
ANCHOR_PUBLIC_VARIABLE = "REPLAYBOOK_ANCHOR_PUBLIC_KEY"


class AnchorKeys:
    """Signs new entries and checks signed ones. Both keys are loaded on first use (a process
    that never anchors never reads, or generates, the signing key)."""

    def __init__(
        self,
        signer: Callable[[], CaseSigningKey] | None,
        trusted: Callable[[], Ed25519PublicKey],
    ) -> None:
        self._signer = functools.cache(signer) if signer is not None else None
        self._trusted = functools.cache(trusted)

    @classmethod
    def of(cls, key: CaseSigningKey) -> AnchorKeys:
        """Keys from one private key (tests, tools)."""
        return cls(lambda: key, lambda: key.public)

    @classmethod
    def checking(cls, public: Ed25519PublicKey) -> AnchorKeys:
        """Keys that check entries and cannot sign (an offline verifier)."""
        return cls(None, lambda: public)

    @property
    def can_sign(self) -> bool:
        return self._signer is not None

    @property
    def trusted(self) -> Ed25519PublicKey:
        return self._trusted()

    @property
    def key_id(self) -> str:
        """The id of the key entries are checked with."""
        return public_key_id(self.trusted)

    def signed_entry(self, anchor: Anchor, index: int, previous: str) -> AnchorEntry:
        """The version 2 entry of ``anchor`` at ``index``, signed."""
        if self._signer is None:
            raise ConfigurationError(
                f"no anchor signing key: set {ANCHOR_KEY_VARIABLE}", field=ANCHOR_KEY_VARIABLE
            )
        key = self._signer()
        entry = anchor_entry(anchor, index, previous, key_id=public_key_id(key.public))
        signature = base64.b64encode(key.sign(signed_bytes(entry))).decode()
        return entry.model_copy(update={"signature": signature})

    def check(self, entry: AnchorEntry) -> bool:
        """Whether a version 2 entry is signed by the trusted key."""
        if entry.signature is None or entry.key_id != self.key_id:
            return False
        try:
            signature = base64.b64decode(entry.signature, validate=True)
        except (binascii.Error, ValueError):
            return False
        return verify_signature(self.trusted, signature, signed_bytes(entry))


def load_anchor_keys(settings: AnchorSettings, home: Path) -> AnchorKeys:
    """The keys of ``settings`` (``REPLAYBOOK_ANCHOR_SIGNING_KEY``, ``…_PUBLIC_KEY``), else the
    development signing key under ``home``. A process given only the public key checks
    anchors and writes none (a replay worker that holds no secret)."""

    def signer() -> CaseSigningKey:
        return load_signing_key(
            settings.signing_key,
            home,
            file_name=ANCHOR_KEY_FILE_NAME,
            variable=ANCHOR_KEY_VARIABLE,
            what="anchor-signing",
        )

    def trusted() -> Ed25519PublicKey:
        if settings.public_key:
            return load_public_key(Path(settings.public_key), ANCHOR_PUBLIC_VARIABLE)
        return signer().public

    verify_only = bool(settings.public_key) and not settings.signing_key
    return AnchorKeys(None if verify_only else signer, trusted)
