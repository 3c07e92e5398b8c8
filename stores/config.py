"""What the stores are opened from: the database, the artifact store and the key-encryption
key, each a section of the process's settings (``worker.settings``), which reads every field
from the variable its alias names. ``open_stores`` takes the ``StoreSettings`` built from them.
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

    @property
    def database_url(self) -> str:
        return self.database.url or default_database_url(self.home)

    @property
    def artifacts_location(self) -> str:
        return self.artifacts.location or default_artifacts(self.home)
