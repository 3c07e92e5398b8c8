"""What a model call of the tool loop saw: its request and its CONTEXT_SNAPSHOT.

A conversation only grows, so with a ``KnownContext`` kept between the calls of one run a call
costs its new messages, not the whole conversation: the messages recorded at the same
positions last time are neither serialized nor stored again, the request's hash continues
from its state after them, and the snapshot lists only the messages that follow the last
snapshot's (``ContextSnapshot.prefix_snapshot_id``). Without one (the replay's graph), or
when the conversation no longer starts with the last snapshot's messages, the snapshot lists
every message, as a snapshot always did.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from models import ContextSnapshot, ExecutionEventType
from models.canonical import canonical_hash, canonicalize
from models.digest import DIGEST_PREFIX, sha256_digest
from models.model_call import ChatMessage, ModelRequest, ToolSchema, canonical_tools
from runtime.recorder import RunRecorder
from runtime.tool_loop.conversation import run_key


class KnownMessage(NamedTuple):
    """A message of a conversation as its context snapshots recorded it."""

    message: ChatMessage
    #: the artifact holding its canonical bytes
    ref: str
    #: its canonical bytes
    data: bytes


@dataclass
class KnownContext:
    """What the last context snapshot of a conversation recorded (see the module docstring)."""

    #: the last snapshot's messages, by position
    messages: list[KnownMessage] = field(default_factory=list)
    #: the message of each of ``messages`` (the identity check runs over this list at C
    #: speed: a few ns a message, the only work on the known part of the conversation)
    objects: list[ChatMessage] = field(default_factory=list, compare=False, repr=False)
    #: the system message sent last (the same object again for the same prompt)
    system: ChatMessage | None = None
    #: the last snapshot recorded (``None``: none yet, or it is not known to be in the run)
    snapshot_id: str | None = None
    #: the request's canonical head, and a sha256 of it and of the first ``hashed`` messages
    #: (each after a ``,`` but the first): the next request's hash continues from it
    head: bytes = b""
    hashed: int = 0
    hasher: Any = field(default=None, compare=False, repr=False)


async def _entry(
    recorder: RunRecorder, message: ChatMessage, data: bytes, stored: dict[bytes, str] | None
) -> KnownMessage:
    ref = stored.get(data) if stored is not None else None
    if ref is None:
        ref = await recorder.artifacts.put(data)
        if stored is not None:
            stored[data] = ref
    return KnownMessage(message, ref, data)


async def _update(
    recorder: RunRecorder,
    full: Sequence[ChatMessage],
    known: KnownContext,
    stored: dict[bytes, str] | None,
) -> int:
    """Bring ``known.messages`` to ``full``; returns how many leading messages of ``full`` are
    the last snapshot's (by content)."""
    entries, objects = known.messages, known.objects
    count = len(entries)
    # the usual case, checked at C speed: the last call's messages, the very objects (by
    # identity: equal objects may differ in their bytes, ``1 == True``), then new ones
    if len(objects) == count <= len(full) and all(map(operator.is_, objects, full)):
        shared = count
        for message in full[count:]:
            data = canonicalize(message.model_dump(mode="json"))
            entries.append(await _entry(recorder, message, data, stored))
            objects.append(message)
        return shared
    shared = 0
    for index, message in enumerate(full):
        old = entries[index] if index < count else None
        if old is not None and old.message is message:
            data = old.data
        else:
            data = canonicalize(message.model_dump(mode="json"))
        if old is not None and old.data == data:
            entry = KnownMessage(message, old.ref, data)
            if shared == index:
                shared += 1
        else:
            entry = await _entry(recorder, message, data, stored)
        if old is not None:
            entries[index] = entry
        else:
            entries.append(entry)
    del entries[len(full) :]
    objects[:] = full
    return shared


def _content_hash(
    request: ModelRequest, known: KnownContext, shared: int, tools_bytes: bytes
) -> str:
    """``sha256_digest(request.canonical_bytes(...))``, hashing only the messages that follow
    those hashed for the last request when its head and those messages are this one's."""
    head, middle, after = request.canonical_shell()
    if known.hasher is not None and known.head == head and known.hashed <= shared:
        hasher, start = known.hasher.copy(), known.hashed
    else:
        hasher, start = hashlib.sha256(head), 0
    entries = known.messages
    for index in range(start, len(entries)):
        if index:
            hasher.update(b",")
        hasher.update(entries[index].data)
    known.head, known.hashed, known.hasher = head, len(entries), hasher.copy()
    hasher.update(middle)
    hasher.update(tools_bytes)
    hasher.update(after)
    return DIGEST_PREFIX + hasher.hexdigest()


async def record_context(
    recorder: RunRecorder,
    call_index: int,
    system_prompt: str | None,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSchema],
    model: str,
    stored: dict[bytes, str] | None = None,
    known: KnownContext | None = None,
) -> tuple[ModelRequest, ContextSnapshot]:
    """The request the model saw and its CONTEXT_SNAPSHOT (each message stored once;
    ``stored``: canonical message bytes -> artifact digest of the messages stored so far).
    ``known``: what the last call of this conversation recorded, updated to this call."""
    known = KnownContext() if known is None else known
    if system_prompt and (known.system is None or known.system.content != system_prompt):
        known.system = ChatMessage(role="system", content=system_prompt)
    full = (*((known.system,) if system_prompt and known.system else ()), *messages)
    shared = await _update(recorder, full, known, stored)
    # messages and tools are validated records already (validating them again costs the
    # whole conversation on every call)
    request = ModelRequest.model_construct(model=model, messages=full, tools=tuple(tools))
    tools_bytes = canonical_tools(tools)
    prefix = known.snapshot_id if shared else None
    own = known.messages[shared:] if prefix is not None else known.messages
    snapshot = ContextSnapshot(
        snapshot_id=f"ctx-{run_key(recorder.run_id, 'context', call_index)}",
        run_id=recorder.run_id,
        step_id=recorder.step_id,
        message_refs=tuple(entry.ref for entry in own),
        tool_catalog_hash=sha256_digest(tools_bytes),
        state_hash=canonical_hash({"messages": len(messages)}),
        content_hash=_content_hash(request, known, shared, tools_bytes),
        prefix_snapshot_id=prefix,
        prefix_messages=shared if prefix is not None else 0,
    )
    await recorder.record(ExecutionEventType.CONTEXT_SNAPSHOT, record=snapshot)
    known.snapshot_id = snapshot.snapshot_id
    return request, snapshot
