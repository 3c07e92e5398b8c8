"""The error answers each route can give, as /openapi.json documents them.

Every ``/api`` route can answer 401 (no or an unknown token), 403 (the token's role may not do
this), 422 (invalid input, or an action the request's parameters make impossible), 400 (a
``Content-Length`` that is not a number) and 503 (a store or Temporal unavailable, with
``Retry-After``); a route with a request body also 413. ``document`` adds these to every
route; a route declares what else it can answer (``answers(404, 409)``) itself, since only it
knows whether it looks anything up or can conflict. schemathesis checks the result
(``tests/api/test_api_schema.py``): no status a route answers is missing.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

DESCRIPTIONS = {
    400: "The request is malformed (a Content-Length that is not a number)",
    401: "No or an unknown bearer token",
    403: "The token's role may not do this (or the runtime refused the action)",
    404: "Nothing found under the id in the path or the body",
    409: "A conflict: another record under this id, a state that refuses the action, "
    "evidence whose integrity check failed, or a side effect to reconcile first",
    410: "The content was destroyed by a deletion request",
    413: "The body is larger than the limit",
    422: "Invalid input, naming the field or the position",
    502: "A model provider failed",
    503: "A store or Temporal is unavailable; retry after Retry-After seconds",
}

#: what every route behind a token can answer
COMMON = (400, 401, 403, 422, 503)
#: what a route with a request body can answer besides
WITH_BODY = (413,)


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for these error codes, described once for the whole API."""
    return {code: {"description": DESCRIPTIONS[code]} for code in codes}


def document(app: FastAPI) -> None:
    """Add the answers every ``/api`` route can give to those its operation declares itself,
    in the generated schema (routes included from routers are not listed one by one)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = generate()
        for path, item in schema["paths"].items():
            if not path.startswith("/api/") or path == "/api/health":
                continue
            for method, operation in item.items():
                codes = COMMON + (WITH_BODY if method in ("post", "put", "patch") else ())
                for code, answer in answers(*codes).items():
                    operation["responses"].setdefault(str(code), answer)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
