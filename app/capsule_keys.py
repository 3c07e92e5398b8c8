"""The keys of this installation's capsules, as the faces need them: the signing key
(``REPLAYBOOK_CASE_SIGNING_KEY``, else the one kept under the home) and the public key a
capsule is checked with (``--public-key``, ``REPLAYBOOK_CASE_PUBLIC_KEY``, else this
installation's). The faces read the environment (composition roots); this module does not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from stores.case_signing import PUBLIC_KEY_VARIABLE as PUBLIC_KEY_VARIABLE
from stores.case_signing import SIGNING_KEY_VARIABLE as SIGNING_KEY_VARIABLE
from stores.case_signing import (
    CaseSigningKey,
    load_signing_key,
    public_pem,
    trusted_public_key,
)


@dataclass(frozen=True)
class CapsuleKeySettings:
    home: Path
    #: ``REPLAYBOOK_CASE_SIGNING_KEY`` (a PEM file), None: the key kept under ``home``
    signing_key: str | None = None
    #: ``REPLAYBOOK_CASE_PUBLIC_KEY`` (a PEM file) capsules are checked with
    public_key: str | None = None


def installation_signing_key(keys: CapsuleKeySettings) -> CaseSigningKey:
    """The key this installation signs capsules with (made under the home on first use)."""
    return load_signing_key(keys.signing_key, keys.home)


def installation_public_pem(keys: CapsuleKeySettings) -> bytes:
    """The PEM public key that verifies this installation's capsules."""
    return public_pem(installation_signing_key(keys).public)


def trusted_capsule_key(
    path: Path | None, keys: CapsuleKeySettings
) -> tuple[Ed25519PublicKey | None, str]:
    """The public key a capsule is checked with, and where it came from."""
    return trusted_public_key(path, keys.public_key, keys.signing_key, keys.home)
