"""The model registry in the settings: local models registered by the stack's URL, others by
``REPLAYBOOK_MODELS``, API keys read from the variables the entries name, refusals in one line."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from models.errors import ConfigurationError, InvalidInputError
from worker.settings import Settings

CONFIGURED = {
    "gpt-mini": {
        "base_url": "https://api.example.com/v1/",
        "model_id": "gpt-4o-mini",
        "api_key_env": "EXAMPLE_KEY",
        "price_per_1k_input": "0.15",
        "price_per_1k_output": "0.6",
        "context_length": 128000,
    }
}


def test_local_and_configured_models_are_registered() -> None:
    settings = Settings.from_env(
        {
            "REPLAYBOOK_LOCAL_MODELS_URL": "http://127.0.0.1:9/v1",
            "REPLAYBOOK_MODELS": json.dumps(CONFIGURED),
            "EXAMPLE_KEY": "sk-test",
        }
    )
    registry = settings.model_registry
    entries = registry.entries()
    assert list(entries) == ["smollm2-135m", "gemma3-270m", "gpt-mini"]
    assert entries["gemma3-270m"].source == "local"
    assert entries["gemma3-270m"].model_id == "gemma3-270m"
    provider = registry.provider("gpt-mini")
    assert provider.profile == "openai-compatible:gpt-4o-mini@https://api.example.com/v1"
    assert provider.price_per_1k_prompt == Decimal("0.15")
    assert provider.price_per_1k_completion == Decimal("0.6")
    assert provider._client.api_key == "sk-test"


def test_no_local_models_without_the_stack() -> None:
    assert Settings.from_env({}).model_registry.entries() == {}


def test_refusals_name_the_variable_or_the_model() -> None:
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_MODELS"):
        Settings.from_env({"REPLAYBOOK_MODELS": "[1, 2"})
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_MODELS"):
        Settings.from_env({"REPLAYBOOK_MODELS": json.dumps({"m": {"base_url": "x"}})})
    registry = Settings.from_env({"REPLAYBOOK_MODELS": json.dumps(CONFIGURED)}).model_registry
    with pytest.raises(ConfigurationError, match="EXAMPLE_KEY is not set"):
        registry.provider("gpt-mini")
    with pytest.raises(InvalidInputError, match="model 'nope' is not registered"):
        registry.entry("nope")
