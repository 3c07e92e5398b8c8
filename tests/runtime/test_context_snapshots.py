"""A context snapshot recorded with what the last call recorded (``KnownContext``: only the new
messages serialized, stored and hashed, listed after a prefix of the last snapshot) pins the
same context as one recorded from nothing: the same whole message list, the same request
hash, the canonical form of the whole request."""

from __future__ import annotations

from typing import Any

from models import ContextSnapshot, ExecutionEventType
from models.canonical import canonicalize
from models.digest import sha256_digest
from models.evidence import context_message_refs, resolvable_snapshots
from models.model_call import ChatMessage, ToolCallRequest, ToolSchema
from runtime.tool_loop.context import KnownContext, record_context

TOOLS = (ToolSchema(name="lookup", description="finds"),)


class _Artifacts:
    def __init__(self) -> None:
        self.puts: list[bytes] = []

    async def put(self, data: bytes) -> str:
        self.puts.append(data)
        return sha256_digest(data)


class _Recorder:
    """What ``record_context`` uses of a run recorder: its artifacts and ``record``."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.step_id = "model"
        self.artifacts = _Artifacts()
        self.snapshots: list[ContextSnapshot] = []

    async def record(self, type: ExecutionEventType, *, record: Any) -> None:
        assert type is ExecutionEventType.CONTEXT_SNAPSHOT
        self.snapshots.append(record)


def _user(n: int) -> ChatMessage:
    return ChatMessage(role="user", content=f"question {n}")


def _assistant(n: int, flag: Any = 1) -> ChatMessage:
    call = ToolCallRequest(id=f"c{n}", name="lookup", arguments={"n": n, "flag": flag})
    return ChatMessage(role="assistant", content=None, tool_calls=(call,))


def _conversations() -> list[tuple[str | None, list[ChatMessage]]]:
    """The contexts of successive calls of one conversation, with the turns a cache can get
    wrong: it grows (the same objects), a message is replaced by an equal-comparing one with
    other bytes (``1 == True``), by equal content in new objects, the conversation shrinks,
    the system prompt changes."""
    messages = [_user(0)]
    calls: list[tuple[str | None, list[ChatMessage]]] = [("be brief", list(messages))]
    for n in range(1, 6):
        messages += [_assistant(n), _user(n)]
        calls.append(("be brief", list(messages)))
    messages[3] = _assistant(2, flag=True)  # == the old one, other canonical bytes
    calls.append(("be brief", list(messages)))
    calls.append(("be brief", [m.model_copy() for m in messages]))  # equal, new objects
    calls.append(("be brief", messages[:4]))  # shorter
    calls.append(("be brief", [*messages[:4], _user(9)]))
    calls.append(("be precise", [*messages[:4], _user(9)]))  # another system prompt
    calls.append((None, [*messages[:4], _user(9), _user(10)]))
    return calls


async def _record(known: KnownContext | None) -> _Recorder:
    recorder = _Recorder("run-1")
    stored: dict[bytes, str] = {}
    for index, (system, messages) in enumerate(_conversations(), start=1):
        await record_context(
            recorder,  # type: ignore[arg-type]
            index,
            system,
            messages,
            TOOLS,
            "m-1",
            stored if known is not None else None,
            KnownContext() if known is None else known,
        )
    return recorder


async def test_known_context_records_the_same_contexts_as_recording_from_nothing() -> None:
    incremental = await _record(KnownContext())
    # the slow path: each call alone, every message serialized, stored and hashed
    whole = await _record(None)
    by_id = {s.snapshot_id: s for s in incremental.snapshots}
    assert all(s.prefix_snapshot_id is None for s in whole.snapshots)
    assert [context_message_refs(s, by_id) for s in incremental.snapshots] == [
        s.message_refs for s in whole.snapshots
    ]
    assert [s.content_hash for s in incremental.snapshots] == [
        s.content_hash for s in whole.snapshots
    ]
    assert resolvable_snapshots(incremental.snapshots) == set(by_id)
    # the growing calls list only their new messages, after the last snapshot's
    assert [len(s.message_refs) for s in incremental.snapshots[1:6]] == [2] * 5
    assert incremental.snapshots[5].prefix_snapshot_id == incremental.snapshots[4].snapshot_id
    # each distinct message is stored once
    assert len(incremental.artifacts.puts) == len(set(incremental.artifacts.puts))


async def test_the_request_hash_is_the_hash_of_the_whole_canonical_request() -> None:
    recorder = _Recorder("run-2")
    known = KnownContext()
    for index, (system, messages) in enumerate(_conversations(), start=1):
        request, snapshot = await record_context(
            recorder,  # type: ignore[arg-type]
            index,
            system,
            messages,
            TOOLS,
            "m-1",
            {},
            known,
        )
        assert snapshot.content_hash == sha256_digest(canonicalize(request.model_dump(mode="json")))
        expected = ((ChatMessage(role="system", content=system),) if system else ()) + tuple(
            messages
        )
        assert request.messages == expected
