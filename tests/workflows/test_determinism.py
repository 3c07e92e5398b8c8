"""Replays saved histories of the workflows with Temporal's Replayer: a change that breaks
determinism (or renames a workflow, activity or query) fails here. See tests/workflows/histories."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from workflows.incident import IncidentWorkflow
from workflows.replay import ReplayWorkflow

HISTORIES = Path(__file__).resolve().parent / "histories"


@pytest.mark.parametrize("name", sorted(p.stem for p in HISTORIES.glob("*.json")))
async def test_saved_history_replays_deterministically(name: str) -> None:
    history = WorkflowHistory.from_json(name, (HISTORIES / f"{name}.json").read_text())
    replayer = Replayer(
        workflows=[ReplayWorkflow, IncidentWorkflow], data_converter=pydantic_data_converter
    )
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def test_histories_are_present() -> None:
    assert {p.stem for p in HISTORIES.glob("*.json")} >= {
        "replay_recorded",
        "replay_prompt_swap_repeat",
    }
