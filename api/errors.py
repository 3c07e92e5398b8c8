"""Errors as HTTP answers, in one place.

Every error answer has the body ``{"status", "code", "field", "message"}`` (and ``problems``, a
list of ``{"field", "problem"}``, when a body fails validation): ``field`` names what was wrong
(a body field in the API's camelCase, a path or query parameter, the ``Authorization`` header or
``body``) and ``message`` says what the problem is. Replaybook's error tree maps as follows:
invalid input 422, not found 404 (content destroyed by a deletion request 410), conflict (including a sequence conflict, a locked piece of
evidence, a refused incident update, broken integrity, a side effect that needs
reconciliation) 409, an action the runtime refused 403, a store or Temporal that failed 503, a
model provider 502. An unexpected error is 500 and is logged with its traceback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from models.errors import (
    ActionRefusedError,
    ConfigurationError,
    ConflictError,
    ContentDestroyedError,
    IntegrityError,
    InvalidInputError,
    ModelProviderError,
    NotFoundError,
    ReplaybookError,
    SideEffectError,
    StoreError,
)
from stores.bundle import UNAVAILABLE_ERRORS

log = structlog.get_logger(__name__)

#: errors of a store that is down, unreachable or shutting down (PostgreSQL's "the database
#: system is shutting down" among them)
_UNAVAILABLE = UNAVAILABLE_ERRORS

#: most specific first
STATUS: tuple[tuple[type[ReplaybookError], int], ...] = (
    (ConfigurationError, 500),
    (InvalidInputError, 422),
    (ContentDestroyedError, 410),
    (NotFoundError, 404),
    (ConflictError, 409),
    (IntegrityError, 409),
    (SideEffectError, 409),
    (ActionRefusedError, 403),
    (StoreError, 503),
    (ModelProviderError, 502),
)

HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


#: seconds a client should wait before retrying a 503 (a store or Temporal that is down)
RETRY_AFTER_SECONDS = 5


def status_of(exc: ReplaybookError) -> int:
    return next((status for kind, status in STATUS if isinstance(exc, kind)), 500)


def error_body(status: int, code: str, field: str, message: str, **extra: Any) -> JSONResponse:
    """An error answer; a 503 says when to try again (``Retry-After``)."""
    body = {"status": status, "code": code, "field": field, "message": message} | extra
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    return JSONResponse(body, status_code=status, headers=headers)


@contextlib.contextmanager
def naming(field: str) -> Iterator[None]:
    """Errors raised inside the block that name no field are about ``field``."""
    try:
        yield
    except ReplaybookError as exc:
        if exc.field is None:
            raise exc.with_field(field) from exc
        raise


def field_of(loc: tuple[Any, ...] | list[Any]) -> str:
    """``("body", "budget", "maxCost")`` → ``budget.maxCost``; a bare ``("body", 7)`` (a JSON
    decoding error at offset 7) → ``body``."""
    parts = [str(p) for p in loc[1:] if not isinstance(p, int)] if len(loc) > 1 else []
    if loc and loc[0] == "body" and not parts:
        return "body"
    return ".".join(parts) or str(loc[0] if loc else "request")


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for error in exc.errors():
            problem = error.get("msg", "invalid")
            if ctx_error := (error.get("ctx") or {}).get("error"):
                problem = f"{problem}: {ctx_error}"
            problems.append({"field": field_of(error.get("loc", ())), "problem": problem})
        first = problems[0] if problems else {"field": "request", "problem": "invalid request"}
        return error_body(
            422,
            "invalid_input",
            first["field"],
            "; ".join(f"{p['field']}: {p['problem']}" for p in problems),
            problems=problems,
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        field = {
            400: "body",
            401: "Authorization",
            403: "Authorization",
            413: "body",
            405: "method",
        }.get(exc.status_code, "path" if exc.status_code == 404 else "request")
        message = str(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no endpoint {request.url.path}"
        if exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        response = error_body(
            exc.status_code, HTTP_CODES.get(exc.status_code, "http_error"), field, message
        )
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    @app.exception_handler(ReplaybookError)
    async def replaybook_error(request: Request, exc: ReplaybookError) -> JSONResponse:
        status = status_of(exc)
        field = exc.field or "request"
        if status >= 500:
            log.error("api request failed", path=request.url.path, error=str(exc), code=exc.code)
        return error_body(status, exc.code, field, str(exc))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        from temporalio.service import RPCError

        if isinstance(exc, RPCError):
            log.error("temporal call failed", path=request.url.path, error=exc.message)
            return error_body(503, "temporal_unavailable", "request", f"Temporal: {exc.message}")
        if isinstance(exc, _UNAVAILABLE):
            # a store that went away below the stores' own error mapping: still "try again"
            log.error("store unavailable", path=request.url.path, error=repr(exc))
            return error_body(503, "store_error", "request", f"store unavailable: {exc!r}")
        log.exception("api request failed", path=request.url.path)
        return error_body(500, "internal_error", "request", "internal error (logged)")
