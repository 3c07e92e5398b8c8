"""EXACT replays the recording (issue 16): the model a live replay calls is the one the run
recorded, found in the configured catalog by its recorded model id; never a silent default."""

from __future__ import annotations

from typing import Any

import pytest

from examples.support_desk.catalog import MODEL_V1, MODEL_V2, support_desk_catalog
from models import ReplayMode
from models.errors import InvalidInputError
from runtime.replay.catalog import replay_model


def test_the_recorded_model_is_found_by_its_profile_or_name() -> None:
    catalog = support_desk_catalog(None)
    v2 = catalog.models[MODEL_V2].profile
    # a run recorded on model 2 is replayed on model 2, even though 1 is the default
    assert replay_model(catalog, ReplayMode.EXACT, None, None, v2) == MODEL_V2
    assert replay_model(catalog, ReplayMode.PROMPT_SWAP, None, None, MODEL_V2) == MODEL_V2
    assert replay_model(catalog, ReplayMode.MODEL_SWAP, MODEL_V1, None, v2) == MODEL_V1
    assert replay_model(catalog, ReplayMode.EXACT, None, None, None) == catalog.default_model


def test_an_unconfigured_recorded_model_is_named_unless_substituted() -> None:
    catalog = support_desk_catalog(None)
    with pytest.raises(InvalidInputError, match="'gpt-4o-2024-08-06' is not configured") as err:
        replay_model(catalog, ReplayMode.EXACT, None, None, "gpt-4o-2024-08-06")
    assert "--substitute-model" in str(err.value)
    chosen = replay_model(catalog, ReplayMode.EXACT, None, MODEL_V1, "gpt-4o-2024-08-06")
    assert chosen == MODEL_V1


class _ProfiledModel:
    def __init__(self, profile: str) -> None:
        self.profile = profile


def _Profiled(profile: str) -> Any:
    """A stand-in for a registered provider: the lookup reads only its profile."""
    return _ProfiledModel(profile)


def test_a_registry_model_is_found_at_another_address() -> None:
    """The local model server gets a new port with each `dev up`: a run recorded on
    gemma3-270m is replayed on gemma3-270m, never on a model with other parameters."""
    recorded = "openai-compatible:gemma3-270m@http://127.0.0.1:41000/v1;temperature=0.8"
    catalog = support_desk_catalog(None)
    catalog.models = {
        "gemma3-270m": _Profiled(recorded.replace("41000", "42000")),
        "smollm2-135m": _Profiled(
            "openai-compatible:smollm2-135m@http://127.0.0.1:42000/v1;temperature=0.8"
        ),
        "gemma-hot": _Profiled(
            "openai-compatible:gemma3-270m@http://127.0.0.1:42000/v1;temperature=1.5"
        ),
    }
    assert replay_model(catalog, ReplayMode.EXACT, None, None, recorded) == "gemma3-270m"
    with pytest.raises(InvalidInputError, match="is not configured"):
        replay_model(catalog, ReplayMode.EXACT, None, None, recorded.replace("0.8", "0.3"))
