"""The application factory: routes, auth, error answers, body limits and ``/metrics``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import make_asgi_app
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from api import (
    answers,
    errors,
    routes_alerts,
    routes_incidents,
    routes_otlp,
    routes_replays,
    routes_runs,
    routes_side_effects,
    ui,
)
from api.config import ApiConfig
from api.limits import BodySizeLimit
from api.state import ApiState
from worker.settings import Settings, load_settings

DESCRIPTION = """
Replay recorded LLM agent runs and run incident forensics (Replaybook).

Every endpoint under `/api` needs `Authorization: Bearer TOKEN` (tokens and their roles come
from `REPLAYBOOK_API_TOKENS` / `REPLAYBOOK_API_TOKENS_FILE`). Roles: `viewer` reads runs,
replays, incidents and reports; `engineer` also starts/cancels replays and opens incidents;
`forensic` also confirms root causes and settles UNKNOWN side effects; `admin` does everything.

Errors answer `{"status", "code", "field", "message"}`, naming the field and the problem.
Request bodies are limited (413 beyond): 64 KiB for control endpoints by default
(`REPLAYBOOK_API_MAX_BODY_BYTES`), 8 MiB for ingestion (`REPLAYBOOK_API_MAX_INGEST_BYTES`).
`/metrics` (Prometheus, no authentication) and `/api/health` are open. The web console is at
`/ui/` (same tokens: a login form sets an HttpOnly cookie, or send the same header).
"""


def create_app(settings: Settings | None = None, config: ApiConfig | None = None) -> FastAPI:
    """The API over ``settings``' stores and Temporal, authenticated per ``config``: the
    settings default to the process's (``load_settings()``), the config to their ``api``
    section (``ApiConfig.from_settings``)."""
    settings = settings or load_settings()
    config = (config or ApiConfig.from_settings(settings.api)).checked()
    state = ApiState(settings, config)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            async with routes_otlp.assembly(app):
                yield
        finally:
            await state.close()

    app = FastAPI(
        title="Replaybook API",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.api = state
    errors.install(app)
    # the ingestion routes first: the router tries each route in turn (and each included
    # router's own), and an agent's events are the requests that come in the thousands
    _ingestion(app)
    app.include_router(routes_runs.router)
    app.include_router(routes_replays.router)
    app.include_router(routes_incidents.router)
    app.include_router(routes_side_effects.router)
    app.include_router(routes_alerts.router)
    app.include_router(routes_alerts.watches)
    app.include_router(routes_otlp.router)
    answers.document(app)
    # the web console (/ui/), over the same tokens and roles; its pages link each workflow
    # to the Temporal Web UI when its address is known (`replaybook dev up` sets it)
    ui.install(app, temporal_ui_url=os.environ.get("REPLAYBOOK_TEMPORAL_UI_URL") or None)

    @app.get("/api/health", tags=["health"], summary="Liveness (no authentication)")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    # the default registry: the seed's metrics (activities/metrics.py) and the process collectors;
    # the exact path too, so that a scraper is not redirected to /metrics/
    metrics = make_asgi_app()
    app.router.routes.append(Route("/metrics", _Asgi(metrics), include_in_schema=False))
    app.mount("/metrics", metrics)
    app.add_middleware(
        BodySizeLimit,
        max_body_bytes=config.max_body_bytes,
        max_ingest_bytes=config.max_ingest_bytes,
    )
    return app


class _Asgi:
    """An ASGI callable Starlette routes to as an app (a bare function would be taken for a
    request-response endpoint)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def _ingestion(app: FastAPI) -> None:
    """``POST /api/runs`` and ``POST /api/runs/{id}/events`` when the ingestion core exists."""
    try:
        from api import routes_ingest
    except ImportError:
        return
    app.include_router(routes_ingest.router)
