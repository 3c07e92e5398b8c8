"""Ingestion of runs recorded outside Replaybook's runtime (``models.ingest`` is the format)."""

from ingest.core import ingest_events, ingest_run

__all__ = ["ingest_events", "ingest_run"]
