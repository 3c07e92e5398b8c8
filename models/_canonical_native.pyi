"""Types of the C extension ``models/_canonical_native.c`` (see ``models.canonical``)."""

from collections.abc import Callable, Sequence
from typing import Any

def canonicalize(value: Any, /) -> bytes | None:
    """The canonical bytes of ``value``, or None when only the reference can answer."""

def canonical_hexdigest(value: Any, /) -> str | None:
    """The hex SHA-256 of the canonical bytes, or None when only the reference can answer."""

def number_text(x: float, /) -> str:
    """ECMAScript ``Number::toString`` of a finite double (``format_number``)."""

def configure(ranges: Sequence[tuple[int, int]], normalize: Callable[..., str], /) -> None:
    """The characters that are not stable for NFC (inclusive, sorted ranges) and
    ``unicodedata.normalize``."""
