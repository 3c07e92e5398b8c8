"""The model endpoint's settings section (``Settings.models``): light to import, unlike the
provider (``runtime.providers.openai_compat``), which loads the ``openai`` SDK."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr

from runtime.env_values import Seconds

DEFAULT_TIMEOUT = 60.0


class ModelEndpointSettings(BaseModel):
    """The OpenAI-compatible endpoint of ``REPLAYBOOK_MODEL_*``; unset when none is configured
    (``OpenAICompatibleProvider.from_settings`` builds its provider)."""

    model_config = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)

    base_url: str | None = Field(None, validation_alias="REPLAYBOOK_MODEL_BASE_URL")
    #: the model the endpoint is asked for (whatever a request names)
    name: str | None = Field(None, validation_alias="REPLAYBOOK_MODEL_NAME")
    api_key: SecretStr | None = Field(
        None, validation_alias=AliasChoices("REPLAYBOOK_MODEL_API_KEY", "OPENAI_API_KEY")
    )
    #: seconds per request
    timeout: Seconds = Field(DEFAULT_TIMEOUT, validation_alias="REPLAYBOOK_MODEL_TIMEOUT")

    @property
    def configured(self) -> bool:
        return bool(self.base_url)
