"""Replaybook's HTTP API (FastAPI): replays, incidents, runs; OpenAPI at ``/openapi.json``.

``create_app`` builds the application; ``replaybook api`` serves it with uvicorn.
"""

from api.app import create_app

__all__ = ["create_app"]
