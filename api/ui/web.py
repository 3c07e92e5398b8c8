"""What the console's pages share: templates, who the caller is (the API's bearer tokens and
roles, from the Authorization header or the console's HttpOnly cookie), a CSRF token for the
forms, links to the Temporal Web UI, and errors rendered as a page.

A browser presents its token through ``/ui/login``, which sets the cookie ``rb_token``
(HttpOnly, SameSite=Strict); curl and scripts send ``Authorization: Bearer TOKEN`` as to the
API. Forms posted with the cookie carry ``csrf``, a digest of the token (a page of another
origin cannot read it)."""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, ParamSpec
from urllib.parse import quote

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.exceptions import HTTPException

from api.auth import READ, Principal, Role, principal_of
from api.errors import status_of
from models.errors import ReplaybookError

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
COOKIE = "rb_token"
P = ParamSpec("P")


class LoginRequired(Exception):
    """No token: a browser is sent to the login page."""


def _offered(request: Request) -> tuple[str | None, bool]:
    """The token offered and whether it came from the header (else the cookie)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip(), True
    return request.cookies.get(COOKIE), False


async def reader(request: Request) -> Principal:
    """The caller, as the API authenticates it; a browser without a token goes to the login
    page, a wrong token gets 401."""
    token, from_header = _offered(request)
    principal = principal_of(request.app.state.api.config, token)
    if principal is None:
        if token is None or not from_header:
            raise LoginRequired()
        raise HTTPException(401, "the bearer token is not valid", {"WWW-Authenticate": "Bearer"})
    if not principal.may(READ):
        raise HTTPException(403, "this needs the role viewer, engineer, forensic or admin")
    request.state.principal = principal
    return principal


Reader = Annotated[Principal, Depends(reader)]


def csrf_token(request: Request) -> str:
    token, _ = _offered(request)
    return hashlib.sha256(f"replaybook-console-csrf:{token}".encode()).hexdigest()[:32]


def check_csrf(request: Request, offered: str) -> None:
    """A form sent with the cookie must carry the page's ``csrf`` (the header needs none: a
    page of another origin cannot set it)."""
    _, from_header = _offered(request)
    if not from_header and not hmac.compare_digest(offered, csrf_token(request)):
        raise HTTPException(403, "the form is stale or from another site (csrf); reload the page")


def temporal_link(request: Request, workflow_id: str | None) -> str | None:
    """The Temporal Web UI's page of a workflow, when the UI's address is configured."""
    base = request.app.state.console_temporal_ui
    if not base or not workflow_id:
        return None
    namespace = request.app.state.api.settings.temporal.namespace
    return f"{base.rstrip('/')}/namespaces/{quote(namespace)}/workflows/{quote(workflow_id)}"


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    principal: Principal | None = getattr(request.state, "principal", None)
    roles = sorted(r.value for r in principal.roles) if principal else []
    context |= {
        "principal": principal,
        "roles": roles,
        "may_operate": bool(principal and principal.may((Role.ENGINEER,))),
        "may_forensic": bool(principal and principal.may((Role.FORENSIC,))),
        "csrf": csrf_token(request),
        "temporal": lambda wid: temporal_link(request, wid),
    }
    return templates.TemplateResponse(request, name, context, status_code=status)


def error_page(request: Request, status: int, message: str, field: str = "") -> HTMLResponse:
    return render(request, "error.html", status=status, code=status, message=message, field=field)


def refused_form(
    request: Request, csrf: str, principal: Principal, allowed: tuple[Role, ...], action: str
) -> HTMLResponse | None:
    """A console form's checks before it acts: its CSRF token (a stale or foreign form is
    refused with 403) and the caller's role (the 403 page says what ``action`` needs); None
    when the form may act."""
    check_csrf(request, csrf)
    if principal.may(allowed):
        return None
    names = " or ".join(r.value for r in (*allowed, Role.ADMIN))
    return error_page(request, 403, f"{action} needs the role {names}")


def validation_reason(exc: ValueError) -> str:
    """What a record refused in a form's values, worded as the API words it: ``field:
    problem`` for each (not pydantic's whole message, which counts the errors, names the
    model and ends in a link)."""
    if isinstance(exc, ValidationError):
        problems = [
            f"{'.'.join(str(p) for p in e['loc'] if not isinstance(p, int)) or 'value'}: {e['msg']}"
            for e in exc.errors()
        ]
        return "; ".join(problems) or "invalid"
    return str(exc).strip() or "invalid"


def html_errors(
    handler: Callable[P, Awaitable[Response]],
) -> Callable[P, Awaitable[Response]]:
    """A page that fails says why on a page (status as the API's for the same error)."""

    @functools.wraps(handler)
    async def wrapped(*args: P.args, **kwargs: P.kwargs) -> Response:
        request = kwargs.get("request")
        assert isinstance(request, Request)
        try:
            return await handler(*args, **kwargs)
        except ReplaybookError as exc:
            return error_page(request, status_of(exc), str(exc), exc.field or "")

    return wrapped


def login_redirect(request: Request) -> RedirectResponse:
    target = quote(str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))
    return RedirectResponse(f"/ui/login?next={target}", status_code=303)
