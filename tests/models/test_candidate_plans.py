"""Plans for candidates of any agent (issue 32, item 2): a tool-loop run's system prompt is a
prompt swap, and a model named beside it is the model that swap calls."""

from __future__ import annotations

from models import FixtureMissPolicy, ReplayMode
from models.replay_plans import plan_for_candidates


def test_a_prompt_and_a_model_candidate_together_call_that_model() -> None:
    both = plan_for_candidates(
        "run-1",
        {"system_prompt": "sha256:" + "a" * 64, "model": "gemma3-270m"},
        replay_id="r-1",
        sampling_seed=1,
        miss=FixtureMissPolicy.FAIL,
    )
    assert both.mode is ReplayMode.PROMPT_SWAP
    assert (both.substitute_model, both.candidate_system_prompt) == (
        "gemma3-270m",
        "sha256:" + "a" * 64,
    )
    alone = plan_for_candidates(
        "run-1",
        {"model": "gemma3-270m"},
        replay_id="r-2",
        sampling_seed=1,
        miss=FixtureMissPolicy.FAIL,
    )
    assert (alone.mode, alone.model_name, alone.substitute_model) == (
        ReplayMode.MODEL_SWAP,
        "gemma3-270m",
        None,
    )
