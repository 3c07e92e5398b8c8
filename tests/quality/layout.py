"""The project's own top-level packages, as the quality tests read them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "models",
    "runtime",
    "forensics",
    "ingest",
    "integrations",
    "stores",
    "activities",
    "workflows",
    "app",
    "cli",
    "api",
    "devstack",
    "worker",
    "examples",
)
