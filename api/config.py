"""The API's configuration from the environment (each variable documented in README.md).

* ``REPLAYBOOK_API_TOKENS``: ``TOKEN=ROLE[+ROLE…][@NAME]`` entries separated by commas, e.g.
  ``tokenA=engineer,tokenB=forensic+engineer@alice``;
* ``REPLAYBOOK_API_TOKENS_FILE``: a file of the same entries, one per line (``#`` comments);
* ``REPLAYBOOK_API_INSECURE_DEV=1``: serve without tokens, every caller acting as ``admin``
  (for a laptop only; never set by default);
* ``REPLAYBOOK_API_MAX_BODY_BYTES`` (default 65536): the largest request body of a control
  endpoint (replays, incidents); larger bodies get 413;
* ``REPLAYBOOK_API_MAX_INGEST_BYTES`` (default 8 MiB): the same for the ingestion endpoints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from api.auth import Role, TokenTable, parse_tokens
from models.errors import ConfigurationError
from runtime.env_values import positive_int

DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_INGEST_BYTES = 8 * 1024 * 1024
TRUE = ("1", "true", "yes")


@dataclass(frozen=True)
class ApiConfig:
    tokens: TokenTable = field(default_factory=dict)
    insecure_dev: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_ingest_bytes: int = DEFAULT_MAX_INGEST_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiConfig:
        env = os.environ if env is None else env
        tokens: TokenTable = {}
        if text := env.get("REPLAYBOOK_API_TOKENS"):
            tokens |= parse_tokens(text, "REPLAYBOOK_API_TOKENS")
        if path := env.get("REPLAYBOOK_API_TOKENS_FILE"):
            try:
                content = Path(path).read_text()
            except OSError as exc:
                raise ConfigurationError(
                    f"REPLAYBOOK_API_TOKENS_FILE: cannot read {path}: {exc.strerror}"
                ) from exc
            tokens |= parse_tokens(content, f"REPLAYBOOK_API_TOKENS_FILE ({path})")
        return cls(
            tokens=tokens,
            insecure_dev=(env.get("REPLAYBOOK_API_INSECURE_DEV") or "").lower() in TRUE,
            max_body_bytes=_size(env, "REPLAYBOOK_API_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES),
            max_ingest_bytes=_size(
                env, "REPLAYBOOK_API_MAX_INGEST_BYTES", DEFAULT_MAX_INGEST_BYTES
            ),
        ).checked()

    def checked(self) -> ApiConfig:
        """Refuse to serve an API nobody can call, or everybody can without saying so."""
        if not self.tokens and not self.insecure_dev:
            raise ConfigurationError(
                "the API needs tokens: set REPLAYBOOK_API_TOKENS (TOKEN=ROLE,…) or "
                "REPLAYBOOK_API_TOKENS_FILE, or REPLAYBOOK_API_INSECURE_DEV=1 on a dev machine"
            )
        return self

    def with_token(self, token: str, *roles: Role) -> ApiConfig:
        return ApiConfig(
            tokens=self.tokens | {token: frozenset(roles)},
            insecure_dev=self.insecure_dev,
            max_body_bytes=self.max_body_bytes,
            max_ingest_bytes=self.max_ingest_bytes,
        )


def _size(env: Mapping[str, str], name: str, default: int) -> int:
    return positive_int(env, name, default, what="a number of bytes")
