"""The keys of this installation's capsules, as the faces need them: the signing key (from
``REPLAYBOOK_CASE_SIGNING_KEY``, else the one kept under the home) and the public key a capsule
is checked with (``--public-key``, ``REPLAYBOOK_CASE_PUBLIC_KEY``, else this installation's)."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from stores.case_signing import (
    PUBLIC_KEY_VARIABLE,
    SIGNING_KEY_VARIABLE,
    CaseSigningKey,
    load_signing_key,
    public_pem,
    trusted_public_key,
)


def _configured_signing_key() -> str | None:
    return os.environ.get(SIGNING_KEY_VARIABLE) or None


def installation_signing_key(home: Path) -> CaseSigningKey:
    """The key this installation signs capsules with (made under ``home`` on first use)."""
    return load_signing_key(_configured_signing_key(), home)


def installation_public_pem(home: Path) -> bytes:
    """The PEM public key that verifies this installation's capsules."""
    return public_pem(installation_signing_key(home).public)


def trusted_capsule_key(path: Path | None, home: Path) -> tuple[Ed25519PublicKey | None, str]:
    """The public key a capsule is checked with, and where it came from."""
    return trusted_public_key(
        path, os.environ.get(PUBLIC_KEY_VARIABLE), _configured_signing_key(), home
    )
