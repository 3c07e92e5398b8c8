"""The local model server with native tool calls: ``llama_cpp.server``'s app, served behind a
small ASGI front in the same process (``python -m devstack.tool_front --config_file …``, what
``devstack.model_server`` starts).

The local models' chat templates drop a request's ``tools``; agent frameworks send ``tools``
and expect ``tool_calls`` back. For ``POST /v1/chat/completions`` with tools the front
translates the body into Replaybook's ``prompt`` form (``runtime.providers.native_tools``,
the same code as the provider's ``tool_calling: "prompt"``), hands it to the llama app
in-process, and answers with ``tool_calls`` — as JSON, or as SSE chunks when the caller asked
for ``stream`` (``stream_options.include_usage`` honoured). Every other request, including
Replaybook's own ``prompt``-mode calls (they carry no ``tools``), reaches the llama app as sent.

An answer carries ``x-replaybook-tool-front: tool_call | content | unparsed`` (how it decoded)
so that a bench counts well-formed tool calls without parsing twice.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from models.errors import InvalidInputError
from runtime.providers.native_tools import (
    Translation,
    answer_completion,
    completion_chunks,
    translate_request,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CHAT_PATH = "/v1/chat/completions"
KIND_HEADER = b"x-replaybook-tool-front"


class ToolFront:
    """ASGI middleware: native tool calls over ``inner`` (the llama app)."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/") == CHAT_PATH
        ):
            await self.inner(scope, receive, send)
            return
        raw = await _read_body(receive)
        try:
            body = json.loads(raw)
            translation = translate_request(body) if isinstance(body, dict) else None
        except ValueError:  # not JSON: the llama app answers that as it always did
            translation = None
        except InvalidInputError as exc:
            await _send_json(send, 400, _error(f"{exc.field}: {exc}", "invalid_request_error"))
            return
        if translation is None:
            await self.inner(scope, _replayed(raw, receive), send)
            return
        await self._translated(scope, receive, send, translation)

    async def _translated(
        self, scope: Scope, receive: Receive, send: Send, translation: Translation
    ) -> None:
        upstream = json.dumps(translation.upstream).encode()
        status, headers, answer = await _call(
            self.inner, _with_length(scope, upstream), _replayed(upstream, receive)
        )
        if status != 200:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        try:
            completion, kind = answer_completion(json.loads(answer), translation.tools)
        except ValueError:
            await _send_json(
                send, 502, _error("the model server's answer is not JSON", "api_error")
            )
            return
        extra = [(KIND_HEADER, kind.encode())]
        if not translation.stream:
            await _send_json(send, 200, completion, extra)
            return
        events = completion_chunks(completion, include_usage=translation.include_usage)
        sse = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": sse + extra})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away before sending it all
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replayed(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) once, then the client's own messages
    (its disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _with_length(scope: Scope, body: bytes) -> Scope:
    headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
    return dict(scope) | {"headers": [*headers, (b"content-length", str(len(body)).encode())]}


async def _call(inner: ASGIApp, scope: Scope, receive: Receive) -> tuple[int, list[Any], bytes]:
    """``inner``'s whole answer (status, headers, body), in-process. ``receive`` passes the
    client's disconnect on: the llama app checks for it before computing."""
    start: dict[str, Any] = {}
    parts: list[bytes] = []

    async def collect(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await inner(scope, receive, collect)
    return int(start.get("status", 500)), list(start.get("headers", [])), b"".join(parts)


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


async def _send_json(
    send: Send, status: int, value: Any, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    data = json.dumps(value, ensure_ascii=False).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send(
        {"type": "http.response.start", "status": status, "headers": headers + (extra or [])}
    )
    await send({"type": "http.response.body", "body": data})


def serve(config_file: str) -> None:
    """Serve the llama app of ``config_file`` (``llama_cpp.server``'s config format) behind the
    front, on the host and port the file names."""
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ConfigFileSettings, ServerSettings

    with open(config_file, "rb") as f:
        config = ConfigFileSettings.model_validate_json(f.read())
    server = ServerSettings.model_validate(config)
    app = create_app(server_settings=server, model_settings=config.models)
    uvicorn.run(ToolFront(app), host=server.host, port=server.port)


if __name__ == "__main__":  # pragma: no cover - the stack's model server process
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config_file", required=True)
    serve(parser.parse_args().config_file)
