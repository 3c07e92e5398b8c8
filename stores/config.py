"""What the stores are opened from: the database, the artifact store, the key-encryption
key and the anchor log, each a section of the process's settings (``worker.settings``), which
reads every field from the variable its alias names. ``open_stores`` takes the
``StoreSettings`` built from them.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr

_SECTION = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)


class DatabaseSettings(BaseModel):
    model_config = _SECTION

    #: ``postgresql://…`` (asyncpg) or ``sqlite:///…`` (aiosqlite); ``None``: the SQLite file
    #: ``replaybook.db`` under the home directory (``Settings`` fills it in)
    url: str | None = Field(None, validation_alias="REPLAYBOOK_DATABASE_URL")
    #: seconds a side effect may stay EXECUTING (dispatched, no outcome recorded) before a
    #: sweep marks it UNKNOWN: the process that dispatched it is presumed dead
    side_effect_lease_seconds: float = Field(
        60.0, gt=0, validation_alias="REPLAYBOOK_SIDE_EFFECT_LEASE_SECONDS"
    )


class ArtifactSettings(BaseModel):
    model_config = _SECTION

    #: a directory, ``file:///path`` or ``s3://bucket/prefix``; ``None``: ``artifacts`` under
    #: the home directory (``Settings`` fills it in)
    location: str | None = Field(None, validation_alias="REPLAYBOOK_ARTIFACTS")
    #: an S3-compatible endpoint (SeaweedFS, MinIO); ``None``: AWS
    s3_endpoint_url: str | None = Field(
        None, validation_alias=AliasChoices("REPLAYBOOK_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
    )
    #: credentials for that endpoint; ``None``: boto3's usual chain (``AWS_*``, profile, role)
    s3_access_key: str | None = Field(None, validation_alias="REPLAYBOOK_S3_ACCESS_KEY_ID")
    s3_secret_key: SecretStr | None = Field(
        None, validation_alias="REPLAYBOOK_S3_SECRET_ACCESS_KEY"
    )


class KekSettings(BaseModel):
    """Where the key-encryption key of raw evidence comes from (see ``stores.encryption``)."""

    model_config = _SECTION

    #: a file holding the key (32 raw bytes, or their base64 text)
    file: Path | None = Field(None, validation_alias="REPLAYBOOK_KEK_FILE")
    #: the base64 text of 32 bytes
    key: SecretStr | None = Field(None, validation_alias="REPLAYBOOK_KEK")
    #: the redaction policy ingestion applies to a run whose header pins none (``none``
    #: turns it off); its raw payloads are sealed in the vault under this KEK
    ingest_redaction: str = Field("redact-v1", validation_alias="REPLAYBOOK_INGEST_REDACTION")


class AnchorSettings(BaseModel):
    """Where run heads are anchored and the key that signs them (``stores.anchors``,
    ``stores.anchor_signing``): both apart from the database and the artifact store, the key
    configured like the KEK."""

    model_config = _SECTION

    #: a directory, ``file:///path`` or ``s3://bucket/prefix`` (a bucket other than the
    #: artifacts'); ``off``: no anchor log; ``None``: ``anchors`` under the home directory
    location: str | None = Field(None, validation_alias="REPLAYBOOK_ANCHORS")
    #: a file holding the Ed25519 private key (PEM, PKCS#8) that signs anchor entries; ``None``:
    #: ``anchor-signing.key`` under the home directory, generated on first use (development)
    signing_key: str | None = Field(None, validation_alias="REPLAYBOOK_ANCHOR_SIGNING_KEY")
    #: a file holding the public key anchors are checked with (PEM, or 32 raw bytes), for a
    #: process that verifies without the signing key; ``None``: the signing key's public half
    public_key: str | None = Field(None, validation_alias="REPLAYBOOK_ANCHOR_PUBLIC_KEY")


#: ``REPLAYBOOK_ANCHORS`` values that turn the anchor log off
ANCHORS_OFF = frozenset({"off", "none"})


def default_database_url(home: Path) -> str:
    return f"sqlite+aiosqlite:///{home / 'replaybook.db'}"


def default_artifacts(home: Path) -> str:
    return str(home / "artifacts")


class StoreSettings(BaseModel):
    """Everything ``open_stores`` needs (``Settings.stores``)."""

    model_config = ConfigDict(frozen=True)

    #: the home directory: the defaults below live under it, and the development key file
    #: is generated there when no KEK is configured
    home: Path
    database: DatabaseSettings = DatabaseSettings()
    artifacts: ArtifactSettings = ArtifactSettings()
    kek: KekSettings = KekSettings()
    anchors: AnchorSettings = AnchorSettings()

    @property
    def database_url(self) -> str:
        return self.database.url or default_database_url(self.home)

    @property
    def artifacts_location(self) -> str:
        return self.artifacts.location or default_artifacts(self.home)

    @property
    def anchors_location(self) -> str | None:
        """Where the anchor log is (None: turned off with ``REPLAYBOOK_ANCHORS=off``)."""
        location = self.anchors.location
        if location is not None and location.strip().lower() in ANCHORS_OFF:
            return None
        return location or str(self.home / "anchors")
