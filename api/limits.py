"""Request body size limits (413), enforced before a body is parsed.

Control endpoints accept ``ApiConfig.max_body_bytes`` (64 KiB by default: their bodies are
a few hundred bytes); the ingestion endpoints (``POST /api/runs``, ``POST
/api/runs/{id}/events``, the OTLP receiver's ``POST /v1/traces``) accept ``max_ingest_bytes``
(8 MiB). A declared ``Content-Length``
over the limit is refused at once; a chunked body is counted as it arrives.
"""

from __future__ import annotations

import re

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body

INGEST_PATHS = re.compile(r"^(/api/runs(/[^/]+/events)?/?|/v1/traces)$")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_body_bytes: int, max_ingest_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_ingest_bytes = max_ingest_bytes

    def limit_for(self, path: str) -> int:
        return self.max_ingest_bytes if INGEST_PATHS.match(path) else self.max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await error_body(400, "bad_request", "Content-Length", "not a number")(
                    scope, receive, send
                )
                return
            if int(declared) > limit:
                await self._too_large(limit)(scope, receive, send)
                return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # FastAPI re-raises an HTTPException met while reading the body; the
                    # handler in api.errors turns it into the 413 answer
                    raise HTTPException(413, self._message(limit))
            return message

        await self.app(scope, counted, send)

    def _message(self, limit: int) -> str:
        return f"the request body is larger than the limit of {limit} bytes"

    def _too_large(self, limit: int) -> JSONResponse:
        return error_body(413, "payload_too_large", "body", self._message(limit))
