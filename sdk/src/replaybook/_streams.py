"""A streamed model call: the caller's stream, unchanged, with every chunk also given to the
recording, which records the assembled answer when the stream ends or is closed."""

from __future__ import annotations

from typing import Any, Protocol


class StreamRecording(Protocol):
    def chunk(self, chunk: Any) -> None: ...

    def finish(self) -> None: ...


class RecordedStream:
    """The caller's stream, unchanged, with every chunk also given to the recording."""

    def __init__(self, inner: Any, recording: StreamRecording) -> None:
        self._inner = inner
        self._recording = recording
        self._done = False

    def __iter__(self) -> RecordedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._inner)
        except StopIteration:
            self._finish()
            raise
        self._recording.chunk(chunk)
        return chunk

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._recording.finish()

    def close(self) -> None:
        self._finish()
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> RecordedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class AsyncRecordedStream:
    def __init__(self, inner: Any, recording: StreamRecording) -> None:
        self._inner = inner
        self._recording = recording
        self._done = False
        self._iterator: Any = None

    def __aiter__(self) -> AsyncRecordedStream:
        return self

    async def __anext__(self) -> Any:
        if self._iterator is None:
            self._iterator = self._inner.__aiter__()
        try:
            chunk = await self._iterator.__anext__()
        except StopAsyncIteration:
            self._finish()
            raise
        self._recording.chunk(chunk)
        return chunk

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._recording.finish()

    async def close(self) -> None:
        self._finish()
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()

    async def __aenter__(self) -> AsyncRecordedStream:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
