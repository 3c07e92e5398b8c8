"""The web console at ``/ui/``: server-rendered pages (Jinja2) over ``app/``, behind the
API's tokens and roles (``docs/console.md``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import FastAPI, Form, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from api.auth import principal_of
from api.ui import pages_incidents, pages_runs
from api.ui.web import COOKIE, HERE, LoginRequired, login_redirect, templates

__all__ = ["install"]


def _safe_next(target: str) -> str:
    """Only a console path: never a redirect off the site."""
    return target if target.startswith("/ui/") and not target.startswith("//") else "/ui/runs"


def install(app: FastAPI, temporal_ui_url: str | None = None) -> None:
    """Serve the console at ``/ui/`` (``temporal_ui_url``: the Temporal Web UI its pages link
    each workflow to)."""
    app.state.console_temporal_ui = temporal_ui_url
    app.include_router(pages_runs.router)
    app.include_router(pages_incidents.router)
    app.mount("/ui/static", StaticFiles(directory=HERE / "static"), name="ui-static")

    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, _: LoginRequired) -> Response:
        return login_redirect(request)

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    async def home() -> Response:
        return RedirectResponse("/ui/runs", status_code=303)

    @app.get("/ui/login", include_in_schema=False)
    async def login_form(request: Request, next: str = "/ui/runs") -> Response:
        return templates.TemplateResponse(
            request, "login.html", {"next": _safe_next(next), "error": None, "principal": None}
        )

    @app.post("/ui/login", include_in_schema=False)
    async def login(
        request: Request,
        token: Annotated[str, Form()] = "",
        next: Annotated[str, Form()] = "/ui/runs",
    ) -> Response:
        if principal_of(request.app.state.api.config, token.strip() or None) is None:
            return templates.TemplateResponse(
                request,
                "login.html",
                {"next": _safe_next(next), "error": "the token is not valid", "principal": None},
                status_code=401,
            )
        response = RedirectResponse(_safe_next(next), status_code=303)
        response.set_cookie(
            COOKIE,
            token.strip(),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/ui",
        )
        return response

    @app.post("/ui/logout", include_in_schema=False)
    async def logout() -> Response:
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response
