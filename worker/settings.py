"""Configuration from the environment. Every variable is documented in README.md."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    artifacts: str
    s3_endpoint_url: str | None
    temporal_address: str
    temporal_namespace: str
    log_format: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("REPLAYBOOK_HOME") or ".replaybook").expanduser().resolve()
        return cls(
            home=home,
            database_url=env.get("REPLAYBOOK_DATABASE_URL")
            or f"sqlite+aiosqlite:///{home / 'replaybook.db'}",
            artifacts=env.get("REPLAYBOOK_ARTIFACTS") or str(home / "artifacts"),
            s3_endpoint_url=env.get("REPLAYBOOK_S3_ENDPOINT_URL")
            or env.get("AWS_ENDPOINT_URL")
            or None,
            temporal_address=env.get("TEMPORAL_ADDRESS") or "127.0.0.1:7233",
            temporal_namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            log_format=env.get("REPLAYBOOK_LOG_FORMAT") or "auto",
        )
