"""The process's settings: one pydantic-settings object, read once by each composition root
(``python -m worker``, the CLI's ``cli.common.load_settings``, the API's ``api.serve``) and
passed down. Every variable is documented in docs/configuration.md.

Each section is a model of the layer that consumes it, its fields named after their variables
(``validation_alias``; the first set one of an ``AliasChoices`` wins): ``database``,
``artifacts`` and ``kek`` (``stores.config``, composed into ``Settings.stores`` for
``open_stores``), ``sandbox`` (``activities.sandbox.config``), ``models`` (the
OpenAI-compatible endpoint, ``runtime.providers.openai_compat``), ``model_registry`` (named
models, ``runtime.providers.registry``); ``api``, ``metrics`` and
``temporal`` are the faces' and the worker's own, defined here. An unset, empty or blank
variable means its default; a refused value is a ``ConfigurationError`` naming the variable
and its rule.

The Temporal section comes from ``temporalio.envconfig``, the SDK's own client configuration:
``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*`` and the
profile file (``TEMPORAL_CONFIG_FILE``, ``TEMPORAL_PROFILE``, else the SDK's default path).
``TEMPORAL_TLS_CERT`` / ``TEMPORAL_TLS_KEY`` / ``TEMPORAL_TLS_CA`` are Replaybook's names for
``TEMPORAL_TLS_CLIENT_CERT_PATH`` / ``…_CLIENT_KEY_PATH`` / ``…_SERVER_CA_CERT_PATH``.

Production reads the process environment and nothing else. ``load_settings(env_file=…)`` adds a
dotenv file *below* the environment: the CLI passes the one ``replaybook dev up`` writes (see
``cli.common``); a variable the environment sets always wins, and the file's S3 endpoint and
credentials are used together or not at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from temporalio.envconfig import ClientConfigProfile, ClientConnectConfig

from activities.sandbox.config import SandboxSettings
from models.errors import ConfigurationError
from runtime.env_values import ByteCount, Flag, Port, configuration_error, read_variables
from runtime.providers.endpoint import ModelEndpointSettings
from runtime.providers.registry import ModelRegistrySettings, api_key_variables
from stores.config import (
    AnchorSettings,
    ArtifactSettings,
    DatabaseSettings,
    KekSettings,
    StoreSettings,
)

DEFAULT_HOME = ".replaybook"
DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"
DEFAULT_TEMPORAL_NAMESPACE = "default"
DEFAULT_MAX_BODY_BYTES = 64 * 1024
DEFAULT_MAX_INGEST_BYTES = 8 * 1024 * 1024
LOG_FORMATS = ("auto", "json", "console")

_SECTION = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)
#: Replaybook's names of the Temporal TLS files → the SDK's (which win when both are set)
_TLS_FILE_SYNONYMS = {
    "TEMPORAL_TLS_CERT": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_KEY": "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_CA": "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
}
_TLS_ON = ("1", "true", "yes", "on")
_TLS_OFF = ("0", "false", "no", "off")
#: an env file's S3 endpoint goes with its credentials: both are ignored when the environment
#: names an endpoint of its own
_S3_ENDPOINT = ("REPLAYBOOK_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")
_S3_GROUP = (*_S3_ENDPOINT, "REPLAYBOOK_S3_ACCESS_KEY_ID", "REPLAYBOOK_S3_SECRET_ACCESS_KEY")


# sections of the faces and the worker -----------------------------------------------------------


class ApiSettings(BaseModel):
    """The HTTP API's tokens and limits (``api.config.ApiConfig.from_settings`` parses them)."""

    model_config = _SECTION

    #: ``TOKEN=ROLE[+ROLE…][@NAME]`` entries separated by commas
    tokens: SecretStr | None = Field(None, validation_alias="REPLAYBOOK_API_TOKENS")
    #: a file of the same entries, one per line (``#`` comments)
    tokens_file: Path | None = Field(None, validation_alias="REPLAYBOOK_API_TOKENS_FILE")
    #: serve without tokens, every caller ``admin`` (a laptop only)
    insecure_dev: Flag = Field(False, validation_alias="REPLAYBOOK_API_INSECURE_DEV")
    #: the largest request body of a control endpoint (larger: 413)
    max_body_bytes: ByteCount = Field(
        DEFAULT_MAX_BODY_BYTES, validation_alias="REPLAYBOOK_API_MAX_BODY_BYTES"
    )
    #: the same for the ingestion endpoints
    max_ingest_bytes: ByteCount = Field(
        DEFAULT_MAX_INGEST_BYTES, validation_alias="REPLAYBOOK_API_MAX_INGEST_BYTES"
    )
    #: seconds without a new span after which an OTLP trace whose root never arrived is
    #: finished as it is (``ingest.otlp_receiver``)
    otlp_idle_seconds: float = Field(300.0, gt=0, validation_alias="REPLAYBOOK_OTLP_IDLE_SECONDS")
    #: where people open the web console (``http(s)://host[:port]/ui/``): the stored HTML
    #: incident reports link back to the incident's page there; unset: no link
    console_url: str | None = Field(
        None, pattern=r"^https?://[^\s\"'<>]+$", validation_alias="REPLAYBOOK_CONSOLE_URL"
    )


class MetricsSettings(BaseModel):
    """The worker's Prometheus endpoints, each served only when its port is set."""

    model_config = _SECTION

    #: Replaybook's ``/metrics``
    port: Port | None = Field(None, validation_alias="REPLAYBOOK_METRICS_PORT")
    #: the Temporal SDK's own (served by its Rust core)
    temporal_port: Port | None = Field(None, validation_alias="REPLAYBOOK_TEMPORAL_METRICS_PORT")


class TemporalSettings(BaseModel):
    """The Temporal service, as ``temporalio.envconfig`` loads it (``TemporalSettings.load``)."""

    model_config = ConfigDict(frozen=True)

    address: str = DEFAULT_TEMPORAL_ADDRESS
    namespace: str = DEFAULT_TEMPORAL_NAMESPACE
    #: everything else the SDK loaded: TLS, API key, gRPC metadata
    profile: InstanceOf[ClientConfigProfile] = Field(
        default_factory=ClientConfigProfile, repr=False
    )

    @classmethod
    def load(cls, variables: Mapping[str, str | None]) -> TemporalSettings:
        """From ``variables`` and the profile file they (or the SDK's defaults) point at."""
        sdk_variables = _sdk_variables(variables)
        try:
            profile = ClientConfigProfile.load(override_env_vars=sdk_variables)
        except Exception as exc:  # the SDK's ConfigError: an unknown profile, a bad TOML file
            raise ConfigurationError(f"Temporal client configuration: {exc}") from None
        return cls(
            address=profile.address or DEFAULT_TEMPORAL_ADDRESS,
            namespace=profile.namespace or DEFAULT_TEMPORAL_NAMESPACE,
            profile=profile,
        )

    def connect_config(self) -> ClientConnectConfig:
        """The keyword arguments of ``Client.connect`` (target host, namespace, TLS, API key,
        gRPC metadata). As in every Temporal SDK, an API key turns TLS on unless
        ``TEMPORAL_TLS`` is false."""
        profile = dataclasses.replace(self.profile, address=self.address, namespace=self.namespace)
        try:
            return profile.to_client_connect_config()  # reads the TLS files
        except OSError as exc:
            tls = profile.tls
            files = {
                "TEMPORAL_TLS_CERT": tls and tls.client_cert,
                "TEMPORAL_TLS_KEY": tls and tls.client_private_key,
                "TEMPORAL_TLS_CA": tls and tls.server_root_ca_cert,
            }
            name = next(
                (k for k, v in files.items() if isinstance(v, Path) and str(v) == exc.filename),
                None,
            )
            raise ConfigurationError(
                f"cannot read Temporal TLS file {exc.filename}"
                f"{f' ({name})' if name else ''}: {exc.strerror}",
                field=name,
            ) from exc


def _sdk_variables(variables: Mapping[str, str | None]) -> dict[str, str]:
    """``variables`` as the SDK reads them: blank ones dropped, ``TEMPORAL_TLS`` spelled as it
    parses it, Replaybook's TLS file names under the SDK's."""
    out = {k: v.strip() for k, v in variables.items() if v is not None and v.strip()}
    if "TEMPORAL_TLS" in out:
        flag = out["TEMPORAL_TLS"].lower()
        if flag in _TLS_ON:
            out["TEMPORAL_TLS"] = "true"
        elif flag in _TLS_OFF:
            out["TEMPORAL_TLS"] = "false"
        else:
            raise ConfigurationError(
                f"TEMPORAL_TLS must be 1, true, yes or 0, false, no, not {out['TEMPORAL_TLS']!r}",
                field="TEMPORAL_TLS",
            )
    for ours, sdk in _TLS_FILE_SYNONYMS.items():
        if ours in out:
            out.setdefault(sdk, str(Path(out.pop(ours)).expanduser()))
    return out


def _log_format(value: Any) -> str:
    text = str(value).strip().lower()
    if text not in LOG_FORMATS:
        raise ValueError("must be auto, json or console")
    return text


# the settings ------------------------------------------------------------------------------------


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,
        extra="ignore",
        validate_by_name=True,
        validate_by_alias=True,
    )

    #: where the embedded stack, the default database, artifacts and dev KEK live
    home: Path = Field(Path(DEFAULT_HOME), validation_alias="REPLAYBOOK_HOME")
    #: ``json``, ``console`` or ``auto`` (console on a terminal)
    log_format: Annotated[str, BeforeValidator(_log_format)] = Field(
        "auto", validation_alias="REPLAYBOOK_LOG_FORMAT"
    )
    #: the container image this process runs, recorded in every environment manifest
    image_digest: str | None = Field(None, validation_alias="REPLAYBOOK_IMAGE_DIGEST")
    #: the most steps one recorded run executes unless its agent sets its own limit
    max_steps: int = Field(1000, ge=1, validation_alias="REPLAYBOOK_MAX_STEPS")
    temporal: TemporalSettings = TemporalSettings()
    database: DatabaseSettings = DatabaseSettings()
    artifacts: ArtifactSettings = ArtifactSettings()
    kek: KekSettings = KekSettings()
    anchors: AnchorSettings = AnchorSettings()
    sandbox: SandboxSettings = SandboxSettings()
    api: ApiSettings = ApiSettings()
    models: ModelEndpointSettings = ModelEndpointSettings()
    model_registry: ModelRegistrySettings = ModelRegistrySettings()
    metrics: MetricsSettings = MetricsSettings()
    #: the tau-bench databases (``env-data``: ``<version>/<domain>/*.json``) live reads and the
    #: counterfactual verdict of imported runs use; unset: the copy packed with the test data
    tau_bench_data: Path | None = Field(None, validation_alias="REPLAYBOOK_TAU_BENCH_DATA")

    @field_validator("home")
    @classmethod
    def _absolute_home(cls, home: Path) -> Path:
        return home.expanduser().resolve()

    @property
    def stores(self) -> StoreSettings:
        """What ``stores.bundle.open_stores`` opens."""
        return StoreSettings(
            home=self.home,
            database=self.database,
            artifacts=self.artifacts,
            kek=self.kek,
            anchors=self.anchors,
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str | None]) -> Settings:
        """The settings of exactly the variables in ``env`` (for tests and tools; a process
        reads its own environment with ``load_settings``)."""
        data = settings_data(env)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise configuration_error(cls, exc) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environment = dict(getattr(env_settings, "env_vars", {}))
        below = dict(getattr(dotenv_settings, "env_vars", {}))
        return (init_settings, _Variables(settings_cls, layered(environment, below)))


class _Variables(PydanticBaseSettingsSource):
    """Every field from the variable its alias names; the Temporal section from envconfig."""

    def __init__(self, settings_cls: type[BaseSettings], variables: Mapping[str, str | None]):
        super().__init__(settings_cls)
        self.variables = variables

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads every field at once

    def __call__(self) -> dict[str, Any]:
        return settings_data(self.variables)


def settings_data(variables: Mapping[str, str | None]) -> dict[str, Any]:
    """The raw values of ``Settings`` read from ``variables``."""
    data = read_variables(Settings, variables)
    data["temporal"] = TemporalSettings.load(variables)
    # the API keys the registry's entries name, read here (the composition root) only
    keys = {
        name: value.strip()
        for name in api_key_variables(variables.get("REPLAYBOOK_MODELS"))
        if (value := variables.get(name)) and value.strip()
    }
    if keys:
        data.setdefault("model_registry", {})["api_keys"] = keys
    return data


def layered(
    environment: Mapping[str, str | None], below: Mapping[str, str | None]
) -> dict[str, str | None]:
    """``environment`` over the values of an env file: a variable the environment sets (not
    blank) wins; the file's S3 endpoint and credentials only count together, when the
    environment names no endpoint."""
    if not below:
        return dict(environment)
    if any((environment.get(name) or "").strip() for name in _S3_ENDPOINT):
        below = {k: v for k, v in below.items() if k not in _S3_GROUP}
    return dict(below) | {k: v for k, v in environment.items() if v is not None and v.strip()}


def load_settings(env_file: Path | None = None) -> Settings:
    """The settings of this process's environment (and, below it, ``env_file`` when given):
    called once by each composition root. A refused value raises ``ConfigurationError``."""
    try:
        return Settings(_env_file=env_file)
    except ValidationError as exc:
        raise configuration_error(Settings, exc) from None
