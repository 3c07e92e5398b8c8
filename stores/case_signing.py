"""The Ed25519 key that signs incident capsules, and the public keys that verify them.

Where the signing key comes from, like the key-encryption key (``stores.encryption``):

1. ``REPLAYBOOK_CASE_SIGNING_KEY``: a file holding the private key (PEM, PKCS#8);
2. development only: ``$REPLAYBOOK_HOME/case-signing.key``, generated (mode 0600) on first use.

The public half is exported as PEM (``replaybook case public-key -o FILE``) and given to
``case verify`` / ``case run`` with ``--public-key FILE`` (or ``REPLAYBOOK_CASE_PUBLIC_KEY``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import structlog
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from models.capsule import key_id_of
from models.errors import ConfigurationError

log = structlog.get_logger(__name__)

SIGNING_KEY_FILE_NAME = "case-signing.key"
SIGNING_KEY_VARIABLE = "REPLAYBOOK_CASE_SIGNING_KEY"
PUBLIC_KEY_VARIABLE = "REPLAYBOOK_CASE_PUBLIC_KEY"


@dataclass(frozen=True)
class CaseSigningKey:
    private: Ed25519PrivateKey
    #: where it was read from (for messages)
    source: str

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def sign(self, data: bytes) -> bytes:
        return self.private.sign(data)


def public_raw(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def public_key_id(key: Ed25519PublicKey) -> str:
    return key_id_of(public_raw(key))


def public_from_raw(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_signature(key: Ed25519PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def load_signing_key(
    configured: str | None,
    home: Path,
    *,
    file_name: str = SIGNING_KEY_FILE_NAME,
    variable: str = SIGNING_KEY_VARIABLE,
    what: str = "case-signing",
) -> CaseSigningKey:
    """The key of ``configured`` (``variable``, e.g. ``REPLAYBOOK_CASE_SIGNING_KEY``), else the
    development key ``file_name`` under ``home``, generated when missing."""
    if configured:
        path = Path(configured).expanduser()
        return CaseSigningKey(_read_private(path, variable), str(path))
    path = home / file_name
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process generated it first: use theirs
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(pem)
            log.warning(
                f"generated a development {what} key; set {variable} in production",
                path=str(path),
            )
    return CaseSigningKey(_read_private(path, f"the development {what} key"), str(path))


def existing_signing_key(configured: str | None, home: Path) -> CaseSigningKey | None:
    """The configured or development signing key when there is one (none is generated)."""
    if configured or (home / SIGNING_KEY_FILE_NAME).exists():
        return load_signing_key(configured, home)
    return None


def load_public_key(path: Path, what: str = "--public-key") -> Ed25519PublicKey:
    """A public key file: PEM (``case public-key``), or the 32 raw bytes."""
    try:
        data = path.expanduser().read_bytes()
    except OSError as exc:
        raise ConfigurationError(
            f"{what} {path}: cannot read: {exc.strerror}", field=what
        ) from None
    try:
        if len(data) == 32:
            return Ed25519PublicKey.from_public_bytes(data)
        key = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise ConfigurationError(
            f"{what} {path}: not an Ed25519 public key ({exc})", field=what
        ) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigurationError(f"{what} {path}: not an Ed25519 public key", field=what)
    return key


def _read_private(path: Path, what: str) -> Ed25519PrivateKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"{what} {path}: cannot read: {exc.strerror}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"{what} {path}: not a PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError(f"{what} {path}: not an Ed25519 private key")
    return key


def trusted_public_key(
    given: Path | None, configured_public: str | None, configured_signing: str | None, home: Path
) -> tuple[Ed25519PublicKey | None, str]:
    """The public key a capsule is checked with, and where it came from: ``given``
    (``--public-key``), else ``configured_public`` (``REPLAYBOOK_CASE_PUBLIC_KEY``), else the
    public half of this installation's signing key, else None (the key the capsule names)."""
    if given is not None:
        return load_public_key(given), str(given)
    if configured_public:
        return load_public_key(Path(configured_public), PUBLIC_KEY_VARIABLE), configured_public
    key = existing_signing_key(configured_signing, home)
    if key is not None:
        return key.public, f"the signing key {key.source}"
    return None, "the key the capsule names (no trusted key given)"
