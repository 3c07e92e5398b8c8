"""A model-name map in the registry (issue 32, item 1): ``"aliases": ["openai:gpt-4o"]`` says once
which endpoint answers for a recorded model, so a replay of a run that recorded it needs no
``--substitute-model``; a recorded model nobody answers for is named, with both ways out."""

from __future__ import annotations

import json

import pytest

from models import ReplayMode
from models.errors import InvalidInputError
from runtime.providers.registry import ModelRegistrySettings
from runtime.replay.catalog import replay_model
from worker.catalogs import catalogs, registry_providers

REGISTRY = {
    "team-gpt": {
        "base_url": "http://127.0.0.1:9/v1",
        "model_id": "gpt-4o-mini",
        "aliases": ["openai:gpt-4o", "imported:gpt-4o"],
    },
    "other": {"base_url": "http://127.0.0.1:9/v1", "model_id": "m", "aliases": ["team-gpt"]},
}


def _registry() -> ModelRegistrySettings:
    return ModelRegistrySettings.model_validate({"REPLAYBOOK_MODELS": json.dumps(REGISTRY)})


def test_aliases_map_recorded_models_to_an_entry() -> None:
    registry = _registry()
    # a registered name is never shadowed by another entry's alias
    assert registry.aliases() == {"openai:gpt-4o": "team-gpt", "imported:gpt-4o": "team-gpt"}
    assert registry.entry("team-gpt").summary()["aliases"] == ["openai:gpt-4o", "imported:gpt-4o"]
    providers = registry_providers(registry)
    assert providers["openai:gpt-4o"] is providers["team-gpt"]
    loop = catalogs(None, None, registry)["tool-loop"]
    name = replay_model(loop, ReplayMode.EXACT, None, None, "openai:gpt-4o")
    assert name == "openai:gpt-4o" and loop.models[name] is loop.models["team-gpt"]
    assert loop.model(name).profile == providers["team-gpt"].profile


def test_an_unanswered_recorded_model_names_both_ways_out() -> None:
    loop = catalogs(None, None, _registry())["tool-loop"]
    with pytest.raises(InvalidInputError) as unknown:
        replay_model(loop, ReplayMode.EXACT, None, None, "anthropic:claude")
    assert "'anthropic:claude' is not configured" in str(unknown.value)
    assert "--substitute-model" in str(unknown.value) and '"aliases"' in str(unknown.value)
    # a run that recorded no model (tau-bench) and no default endpoint configured
    with pytest.raises(InvalidInputError, match="recorded no model profile") as none:
        replay_model(loop, ReplayMode.EXACT, None, None, None)
    assert none.value.field == "substitute_model"
    assert replay_model(loop, ReplayMode.EXACT, None, "team-gpt", None) == "team-gpt"
