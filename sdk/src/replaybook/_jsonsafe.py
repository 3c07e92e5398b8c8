"""Values as JSON the server accepts: objects the agent passes around (pydantic models,
dataclasses, enums, bytes, sets…) become plain JSON, and what JSON cannot say faithfully
(NaN, U+0000, integers past 2**53) is made representable rather than refused."""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

_SAFE_INT = 2**53 - 1
_MAX_DEPTH = 48


def json_safe(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else _no_surrogates(value)
    if isinstance(value, int):
        return value if abs(value) <= _SAFE_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth > _MAX_DEPTH:
        return repr(value)[:1000]
    if isinstance(value, dict):
        return {str(json_safe(k, depth + 1)): json_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v, depth + 1) for v in value]
    if isinstance(value, enum.Enum):
        return json_safe(value.value, depth + 1)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    dump = getattr(value, "model_dump", None)  # pydantic v2 models (openai's types too)
    if callable(dump):
        try:
            return json_safe(dump(mode="json"), depth + 1)
        except Exception:
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_safe(dataclasses.asdict(value), depth + 1)
    return str(value)


def _no_surrogates(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text
