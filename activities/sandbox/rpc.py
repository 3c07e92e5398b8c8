"""The pipe protocol between a replay worker and its sandboxed step process.

One frame = 4-byte big-endian length + UTF-8 JSON. The child's first frame is
``{"ready": pid}`` (the worker's start watchdog waits for it). The worker sends a job; the
child sends ``{"call": method, "params": {...}}`` (with ``"puts": [{"data", "digest"}, ...]``: artifacts
it put since its last call, stored by the worker before the call is served — so a step costs
one message) and waits for ``{"ok": value}`` or ``{"error": {...}}``;
it ends the job with ``{"done": output, "cpu_seconds": used}`` or ``{"failed": {...}}`` and
waits for the next job (end of input then ends the child). Requests are strictly sequential (the child's
step code is one coroutine chain), so no request ids are needed.

Values that JSON cannot carry are tagged: bytes as ``{"$b64": ...}`` (see ``codec``).
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

#: a frame larger than this is a protocol violation (payloads above ~1 MB are artifacts
#: anyway; the largest legitimate frame is a step's batch of events)
MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct(">I")
#: the child's first frame, ``{"ready": pid}``, is tiny: anything larger is not it
MAX_READY_BYTES = 1024


class ProtocolError(Exception):
    """The other side sent something that is not a frame (it is not a ReplaybookError: it
    never crosses the pipe, the runner turns it into SandboxViolationError)."""


class FrameTooLarge(ProtocolError):
    """A frame over the receiver's quota (smaller than ``MAX_FRAME``): a quota, not a
    protocol violation."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"the limit is {limit} bytes (REPLAYBOOK_SANDBOX_MAX_MESSAGE_BYTES)")
        self.length = length


def encode_frame(message: Any) -> bytes:
    data = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(data)) + data


def decode_body(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ProtocolError(f"frame is not JSON: {exc}") from None


def check_length(header: bytes, quota: int | None = None) -> int:
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"frame of {length} bytes announced, the limit is {MAX_FRAME}")
    if quota is not None and length > quota:
        raise FrameTooLarge(length, quota)
    return length


# child side: blocking file objects (the child does one thing at a time) ---------------------


def write_frame(stream: BinaryIO, message: Any) -> None:
    stream.write(encode_frame(message))
    stream.flush()


class EndOfInput(ProtocolError):
    """The pipe closed between frames: the other side is done (or gone)."""


def read_frame(stream: BinaryIO) -> Any:
    first = stream.read(1)
    if not first:
        raise EndOfInput("the pipe closed")
    header = first + _read_exact(stream, _HEADER.size - 1)
    return decode_body(_read_exact(stream, check_length(header)))


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise ProtocolError("the pipe closed in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
