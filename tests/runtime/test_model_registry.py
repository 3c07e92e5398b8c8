"""The model registry in the settings: local models registered by the stack's URL, others by
``REPLAYBOOK_MODELS``, API keys read from the variables the entries name, refusals in one line."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from activities.sandbox.config import SandboxSettings
from models.errors import ConfigurationError, InvalidInputError
from runtime.providers.registry import MAX_REGISTRY_TIMEOUT, REGISTRY_TIMEOUT
from runtime.replay.catalog import answers_one_at_a_time
from worker.settings import Settings
from workflows.replay import STEP_TIMEOUT

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


def test_local_models_answer_one_at_a_time_and_others_as_configured() -> None:
    settings = Settings.from_env(
        {
            "REPLAYBOOK_LOCAL_MODELS_URL": "http://127.0.0.1:9/v1",
            "REPLAYBOOK_MODELS": json.dumps(
                {
                    **CONFIGURED,
                    "own-llama": {
                        "base_url": "http://h/v1",
                        "model_id": "m",
                        "one_at_a_time": True,
                    },
                }
            ),
            "EXAMPLE_KEY": "sk-test",
        }
    )
    registry = settings.model_registry
    in_turn = {name for name, e in registry.entries().items() if e.one_at_a_time}
    assert in_turn == {"smollm2-135m", "gemma3-270m", "own-llama"}
    assert answers_one_at_a_time(registry.provider("gemma3-270m"))
    assert not answers_one_at_a_time(registry.provider("gpt-mini"))


def test_a_model_call_fits_in_a_replay_step() -> None:
    # the call runs inside one step: the sandbox's wall-clock limit and the step activity's
    # start-to-close timeout must leave it room, else a slow call is killed, not retried
    assert REGISTRY_TIMEOUT <= MAX_REGISTRY_TIMEOUT < SandboxSettings().wall_seconds
    assert MAX_REGISTRY_TIMEOUT < STEP_TIMEOUT.total_seconds()
    assert Settings.from_env({}).model_registry.timeout == REGISTRY_TIMEOUT
    allowed = Settings.from_env({"REPLAYBOOK_MODELS_TIMEOUT": str(MAX_REGISTRY_TIMEOUT)})
    assert allowed.model_registry.timeout == MAX_REGISTRY_TIMEOUT
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_MODELS_TIMEOUT"):
        Settings.from_env({"REPLAYBOOK_MODELS_TIMEOUT": str(MAX_REGISTRY_TIMEOUT + 1)})
