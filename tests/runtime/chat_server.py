"""A small real HTTP server speaking the chat-completions wire format, for provider tests.

It records every request it receives and answers ``POST /v1/chat/completions`` from a queue of
scripted responses, so tests see exactly what went over the wire, and how many times.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATH = "/v1/chat/completions"
HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: a status, a JSON (or raw text) body, and an optional delay;
    ``trickle``: seconds between the body's bytes (headers first, then one byte at a time, as a
    stalled server or proxy can)."""

    status: int = 200
    body: Any = None
    delay: float = 0.0
    trickle: float = 0.0


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: Any


def completion(
    message: dict[str, Any],
    *,
    finish_reason: str = "stop",
    usage: dict[str, int] | None = None,
    response_id: str = "chatcmpl-1",
    model: str = "served-model",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": sum(usage.values())}
    return body


def text_answer(
    content: str, *, prompt_tokens: int = 0, completion_tokens: int = 0, **kw: Any
) -> Scripted:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return Scripted(body=completion({"role": "assistant", "content": content}, usage=usage, **kw))


def tool_call_answer(*calls: tuple[str, str, str], **kw: Any) -> Scripted:
    """``calls`` are ``(id, name, arguments)``; ``arguments`` is sent verbatim as the JSON string."""
    wire = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
    ]
    message = {"role": "assistant", "content": None, "tool_calls": wire}
    return Scripted(body=completion(message, finish_reason="tool_calls", **kw))


def error_answer(status: int, message: str, *, type_: str = "invalid_request_error") -> Scripted:
    return Scripted(
        status, {"error": {"message": message, "type": type_, "param": None, "code": None}}
    )


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that gave up on a trickled answer (the deadline tests) resets the connection:
        # expected there, so not printed as a traceback in the suite's output
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


class ChatServer:
    """``with ChatServer() as server:`` serves on a free port of 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: deque[Scripted] = deque()
        #: answers from the request itself (when set, before the queue): a scripted model
        #: whose answer depends on what it was sent (its system prompt…)
        self.answer_with: Callable[[Any], Scripted] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _QuietServer(("127.0.0.1", 0), _handler_class(self))
        self._httpd.daemon_threads = True
        # a short poll interval: shutdown() waits up to one interval for the serving loop
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def bodies(self) -> list[Any]:
        with self._lock:
            return [r.body for r in self.received if r.path == CHAT_PATH]

    def script(self, *answers: Scripted) -> None:
        with self._lock:
            self._script.extend(answers)

    def start(self, deadline_seconds: float = 5.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + deadline_seconds
        while True:  # ready once the serving loop answers a real HTTP request
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=0.5)
                try:
                    conn.request("GET", HEALTH_PATH)
                    if conn.getresponse().status == 200:
                        return
                finally:
                    conn.close()
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"chat server on port {self.port} not ready in {deadline_seconds}s"
                )
            time.sleep(0.01)  # poll interval, bounded by the deadline above

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers that are delaying an answer
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # called from handler threads
    def _record_and_pop(self, received: Received) -> Scripted:
        with self._lock:
            self.received.append(received)
            if self.answer_with is not None:
                return self.answer_with(received.body)
            if self._script:
                return self._script.popleft()
        return error_answer(500, "chat server: no scripted response left", type_="server_error")


def _handler_class(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path == HEALTH_PATH:
                self._send(200, {"ok": True})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
            if self.path != CHAT_PATH:
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            answer = server._record_and_pop(Received(self.path, dict(self.headers), body))
            if answer.delay and server._stopping.wait(answer.delay):
                self.close_connection = True  # stopping: nobody waits for this answer any more
                return
            self._send(answer.status, answer.body, answer.trickle)

        def _send(self, status: int, body: Any, trickle: float = 0.0) -> None:
            text = body if isinstance(body, str) else json.dumps(body)
            payload = text.encode()
            content_type = "text/plain" if isinstance(body, str) else "application/json"
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not trickle:
                    self.wfile.write(payload)
                    return
                for i in range(len(payload)):
                    self.wfile.write(payload[i : i + 1])
                    self.wfile.flush()
                    if server._stopping.wait(trickle):
                        return
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout); that is what some tests provoke

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
