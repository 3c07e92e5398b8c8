"""The API's configuration, from the ``api`` section of the settings (``worker.settings.
ApiSettings``; each variable documented in docs/configuration.md):

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

from dataclasses import dataclass, field

from api.auth import Role, TokenTable, parse_tokens
from models.errors import ConfigurationError
from worker.settings import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INGEST_BYTES, ApiSettings


@dataclass(frozen=True)
class ApiConfig:
    tokens: TokenTable = field(default_factory=dict)
    insecure_dev: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_ingest_bytes: int = DEFAULT_MAX_INGEST_BYTES

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> ApiConfig:
        """The token table of ``REPLAYBOOK_API_TOKENS`` and ``REPLAYBOOK_API_TOKENS_FILE`` (read
        here) and the limits, refused when nobody could call the API."""
        tokens: TokenTable = {}
        if settings.tokens is not None:
            tokens |= parse_tokens(settings.tokens.get_secret_value(), "REPLAYBOOK_API_TOKENS")
        if (path := settings.tokens_file) is not None:
            try:
                content = path.read_text()
            except OSError as exc:
                raise ConfigurationError(
                    f"REPLAYBOOK_API_TOKENS_FILE: cannot read {path}: {exc.strerror}",
                    field="REPLAYBOOK_API_TOKENS_FILE",
                ) from exc
            tokens |= parse_tokens(content, f"REPLAYBOOK_API_TOKENS_FILE ({path})")
        return cls(
            tokens=tokens,
            insecure_dev=settings.insecure_dev,
            max_body_bytes=settings.max_body_bytes,
            max_ingest_bytes=settings.max_ingest_bytes,
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
