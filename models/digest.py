"""Content digests in the one textual form Replaybook uses: ``sha256:<64 lowercase hex>``."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import StringConstraints

from models.errors import ArtifactIntegrityError, InvalidInputError

DIGEST_PREFIX = "sha256:"
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
_DIGEST_RE = re.compile(DIGEST_PATTERN)

#: A pydantic field type for digests; anything else is refused at validation.
Digest = Annotated[str, StringConstraints(pattern=DIGEST_PATTERN)]


def sha256_digest(data: bytes) -> str:
    """Return the ``sha256:`` digest of ``data``."""
    return DIGEST_PREFIX + hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """Tell whether ``value`` is a well-formed ``sha256:`` digest."""
    return isinstance(value, str) and _DIGEST_RE.fullmatch(value) is not None


def digest_hex(digest: str) -> str:
    """Return the 64 hex characters of a digest, refusing anything that is not one."""
    if not is_digest(digest):
        raise InvalidInputError(f"not a sha256 digest: {digest!r} (expected 'sha256:' + 64 hex)")
    return digest[len(DIGEST_PREFIX) :]


def verify_content(data: bytes, digest: str, what: str) -> bytes:
    """Return ``data`` if it hashes to ``digest``; otherwise raise ``ArtifactIntegrityError``
    naming ``what`` and the actual hash (bad bytes are never handed on)."""
    actual = sha256_digest(data)
    if actual != digest:
        raise ArtifactIntegrityError(f"{what} is corrupted: its {len(data)} bytes hash to {actual}")
    return data
