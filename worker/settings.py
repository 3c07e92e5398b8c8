"""Configuration from the environment. Every variable is documented in README.md.

Where a variable is unset and ``replaybook dev up`` runs the embedded stack under
``REPLAYBOOK_HOME``, the stack's own Temporal address and S3 endpoint are used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from activities.sandbox.config import SandboxSettings


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    artifacts: str
    s3_endpoint_url: str | None
    temporal_address: str
    temporal_namespace: str
    log_format: str
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    temporal_tls: bool = False
    temporal_tls_cert: str | None = None
    temporal_tls_key: str | None = None
    temporal_tls_ca: str | None = None
    temporal_api_key: str | None = None
    #: how replay steps are isolated (REPLAYBOOK_SANDBOX=bubblewrap|off, limits)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        from devstack.stack import load_stack_state

        env = os.environ if env is None else env
        home = Path(env.get("REPLAYBOOK_HOME") or ".replaybook").expanduser().resolve()
        stack = (load_stack_state(home) or {}).get("components", {})
        s3_endpoint = env.get("REPLAYBOOK_S3_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL") or None
        access_key = secret_key = None
        if s3_endpoint is None and "seaweedfs" in stack:
            s3_endpoint = stack["seaweedfs"]["endpoint_url"]
            access_key, secret_key = (
                stack["seaweedfs"]["access_key"],
                stack["seaweedfs"]["secret_key"],
            )
        temporal = (
            env.get("TEMPORAL_ADDRESS")
            or stack.get("temporal", {}).get("address")
            or "127.0.0.1:7233"
        )
        return cls(
            home=home,
            database_url=env.get("REPLAYBOOK_DATABASE_URL")
            or f"sqlite+aiosqlite:///{home / 'replaybook.db'}",
            artifacts=env.get("REPLAYBOOK_ARTIFACTS") or str(home / "artifacts"),
            s3_endpoint_url=s3_endpoint,
            temporal_address=temporal,
            temporal_namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            log_format=env.get("REPLAYBOOK_LOG_FORMAT") or "auto",
            s3_access_key=access_key,
            s3_secret_key=secret_key,
            temporal_tls=(env.get("TEMPORAL_TLS") or "").lower() in ("1", "true", "yes"),
            temporal_tls_cert=env.get("TEMPORAL_TLS_CERT") or None,
            temporal_tls_key=env.get("TEMPORAL_TLS_KEY") or None,
            temporal_tls_ca=env.get("TEMPORAL_TLS_CA") or None,
            temporal_api_key=env.get("TEMPORAL_API_KEY") or None,
            sandbox=SandboxSettings.from_env(env),
        )


def load_settings() -> Settings:
    """Read the settings from the environment: called once by each composition root."""
    return Settings.from_env()
