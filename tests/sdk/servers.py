"""Real servers for the SDK's tests: the Replaybook API as its own process (``python -m api``,
stopped and started again by the spool tests), and a small real HTTP server that speaks the
chat-completions wire format (JSON and server-sent events), scripted like a tool-calling model:
the SDK's mechanics are tested against it (the local model server is used where a real model
matters, ``test_sdk_local_model``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from devstack.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "sdk-engineer-token"
ADMIN = "sdk-admin-token"


class ApiProcess:
    """``python -m api`` on a free port over the given database, with an engineer token."""

    def __init__(self, home: Path, database_url: str) -> None:
        self.home = home
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("REPLAYBOOK_", "AWS_", "TEMPORAL_"))
        } | {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": database_url,
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_API_TOKENS": f"{TOKEN}=engineer,{ADMIN}=admin",
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # ingestion and reads need no Temporal
            "PYTHONPATH": str(ROOT),
        }
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.home / "api.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "api", "--port", str(self.port)],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.home / "api.log").read_text()[-3000:]
            try:
                if httpx.get(f"{self.url}/api/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError("the API did not start within 60 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def client(self, token: str = TOKEN) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )


def poll(check: Any, what: str, deadline_s: float = 30) -> Any:
    """``check()`` until it returns something truthy, or fail naming ``what``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def script_answer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A refund agent's model: look the order up, refund it, then answer."""
    tool_results = [m for m in messages if m.get("role") == "tool"]
    if not tool_results:
        return {"tool_calls": [("call_lookup_1", "lookup_order", {"order_id": "A-17"})]}
    if len(tool_results) == 1:
        return {"tool_calls": [("call_refund_1", "refund", {"order_id": "A-17", "amount": 20.5})]}
    return {"content": "I refunded 20.50 EUR for order A-17."}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        hook = self.server.hook  # type: ignore[attr-defined]
        if hook is not None:
            hook(len(self.server.requests))  # type: ignore[attr-defined]
        if self.path.endswith("/responses"):
            self._responses(body)
            return
        answer = script_answer(body["messages"])
        if body.get("stream"):
            self._stream(body, answer)
        else:
            self._json(body, answer)

    def _responses(self, body: dict[str, Any]) -> None:
        """The Responses API: the same script, the input items read as chat messages."""
        items: list[Any] = [body["input"]] if isinstance(body["input"], str) else body["input"]
        messages = [
            {"role": "tool"} if item.get("type") == "function_call_output" else item
            for item in items
        ]
        answer = script_answer(messages)
        output: list[dict[str, Any]] = [
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for cid, name, args in answer.get("tool_calls", [])
        ]
        if answer.get("content"):
            output.append(
                {
                    "type": "message",
                    "id": "msg_1",
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": answer["content"], "annotations": []}
                    ],
                }
            )
        self._send_json(
            {
                "id": "resp_scripted",
                "object": "response",
                "created_at": 1,
                "model": body["model"],
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {
                    "input_tokens": 40,
                    "output_tokens": 6,
                    "total_tokens": 46,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )

    def _send_json(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _calls(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"id": cid, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for cid, n, a in answer.get("tool_calls", [])
        ]

    def _json(self, body: dict[str, Any], answer: dict[str, Any]) -> None:
        calls = self._calls(answer)
        data = {
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": 1,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": answer.get("content"),
                        **({"tool_calls": calls} if calls else {}),
                    },
                    "finish_reason": "tool_calls" if calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
        }
        self._send_json(data)

    def _stream(self, body: dict[str, Any], answer: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        base = {"id": "chatcmpl-streamed", "object": "chat.completion.chunk", "created": 1}
        base["model"] = body["model"]
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        text = answer.get("content") or ""
        deltas += [{"content": text[i : i + 5]} for i in range(0, len(text), 5)]
        for index, call in enumerate(self._calls(answer)):
            args = call["function"]["arguments"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            for i in range(0, len(args), 4):
                deltas.append(
                    {"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 4]}}]}
                )
        finish = "tool_calls" if answer.get("tool_calls") else "stop"
        chunks = [
            {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append(
            {
                **base,
                "choices": [],
                "usage": {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49},
            }
        )
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class ChatServer:
    """The scripted chat-completions server on a free port (``base_url`` ends in ``/v1``)."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.requests = []  # type: ignore[attr-defined]
        #: called with the request's number (from 1) before it is answered
        self.httpd.hook = None  # type: ignore[attr-defined]
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.httpd.requests  # type: ignore[attr-defined]

    def on_request(self, hook: Any) -> None:
        self.httpd.hook = hook  # type: ignore[attr-defined]

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
