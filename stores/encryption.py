"""Envelope encryption of raw evidence: AES-256-GCM under per-subject data keys, each data key
wrapped by a key-encryption key (KEK).

The KEK comes from configuration (``stores.config.KekSettings``), in this order:

1. ``REPLAYBOOK_KEK_FILE``: a file holding the key (32 raw bytes, or their base64 text);
2. ``REPLAYBOOK_KEK``: the base64 text of 32 bytes;
3. development only: ``$REPLAYBOOK_HOME/kek.key``, generated (mode 0600) on first use when
   neither is set, with a warning in the log. Production must set one of the two above.

A cloud KMS plugs in through the ``KeyEncryptionKey`` protocol (``wrap``/``unwrap`` of a data
key, e.g. AWS KMS ``Encrypt``/``Decrypt``); only the local implementation ships here.
Destroying a subject's wrapped data key (crypto-shredding) makes its ciphertexts unreadable
even from backups.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import structlog
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from models.errors import ConfigurationError, IntegrityError
from stores.config import KekSettings

log = structlog.get_logger(__name__)

KEY_BYTES = 32
NONCE_BYTES = 12
KEK_FILE_NAME = "kek.key"


@runtime_checkable
class KeyEncryptionKey(Protocol):
    """Wraps and unwraps data keys; a cloud KMS implements the same two calls."""

    #: a non-secret id of the key (recorded beside each wrapped data key)
    key_id: str

    def wrap(self, data_key: bytes, context: str) -> bytes: ...

    def unwrap(self, wrapped: bytes, context: str) -> bytes: ...


class LocalKeyEncryptionKey:
    """A KEK held in process memory (from a file or the environment); wraps with AES-256-GCM,
    the ``context`` (the subject id) bound as associated data."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ConfigurationError(
                f"the key-encryption key must be {KEY_BYTES} bytes, got {len(key)}"
            )
        self._aead = AESGCM(key)
        self.key_id = "local:" + hashlib.sha256(b"replaybook-kek-id\x00" + key).hexdigest()[:16]

    def wrap(self, data_key: bytes, context: str) -> bytes:
        return seal(self._aead, data_key, b"replaybook-dek\x00" + context.encode())

    def unwrap(self, wrapped: bytes, context: str) -> bytes:
        return open_sealed(self._aead, wrapped, b"replaybook-dek\x00" + context.encode())


def seal(aead: AESGCM, plaintext: bytes, associated: bytes) -> bytes:
    """``nonce ‖ ciphertext ‖ tag`` with a fresh random 96-bit nonce."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + aead.encrypt(nonce, plaintext, associated)


def open_sealed(aead: AESGCM, sealed: bytes, associated: bytes) -> bytes:
    try:
        return aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated)
    except InvalidTag:
        raise IntegrityError(
            "ciphertext does not authenticate (wrong key, or the ciphertext or its binding "
            "to the evidence was altered)"
        ) from None


def data_key_cipher(data_key: bytes) -> AESGCM:
    return AESGCM(data_key)


def new_data_key() -> bytes:
    return AESGCM.generate_key(bit_length=256)


def _decode_key(text: bytes, where: str) -> bytes:
    if len(text) == KEY_BYTES:
        return text
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigurationError(f"{where} is neither 32 raw bytes nor base64 text") from None
    if len(key) != KEY_BYTES:
        raise ConfigurationError(f"{where} decodes to {len(key)} bytes; 32 are required")
    return key


def load_kek(
    settings: KekSettings | None = None, home: Path | None = None
) -> LocalKeyEncryptionKey:
    """The KEK from ``REPLAYBOOK_KEK_FILE`` or ``REPLAYBOOK_KEK`` (``settings``); else the
    development key file under ``home`` (default ``./.replaybook``), generated when missing."""
    settings = settings or KekSettings()
    if settings.file is not None:
        path = settings.file.expanduser()
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(
                f"REPLAYBOOK_KEK_FILE {path}: cannot read: {exc.strerror}"
            ) from None
        return LocalKeyEncryptionKey(_decode_key(data, f"REPLAYBOOK_KEK_FILE {path}"))
    if settings.key is not None:
        text = settings.key.get_secret_value().encode()
        return LocalKeyEncryptionKey(_decode_key(text, "REPLAYBOOK_KEK"))
    home = home or Path(".replaybook").resolve()
    path = home / KEK_FILE_NAME
    if not path.exists():
        home.mkdir(parents=True, exist_ok=True)
        key = base64.b64encode(new_data_key())
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process generated it first: use theirs
        else:
            with os.fdopen(fd, "wb") as handle:
                handle.write(key + b"\n")
            log.warning(
                "generated a development key-encryption key; set REPLAYBOOK_KEK_FILE or "
                "REPLAYBOOK_KEK in production",
                path=str(path),
            )
    return LocalKeyEncryptionKey(_decode_key(path.read_bytes(), f"key file {path}"))
