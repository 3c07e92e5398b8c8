"""EXACT replays the recording (issue 16): the model a live replay calls is the one the run
recorded, found in the configured catalog by its recorded model id; never a silent default."""

from __future__ import annotations

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
