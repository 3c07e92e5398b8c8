"""EXACT replays the recording, and says where today's world differs (issue 16), through the
real Replay workflow on a real Temporal dev server with sandboxed replay steps:

- the prompt sent is the recorded compiled prompt; today's compilation differing from it is a
  ``PROMPT_DRIFT`` difference (both hashes, a unified diff) and LIMITED confidence;
- the replay worker's environment differing from the recorded manifest is an
  ``ENVIRONMENT_DRIFT`` difference naming the changed keys, and LIMITED confidence.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

import examples.support_desk.agent as support_agent
import runtime.session
from examples.support_desk.spec import run_scenario
from models import ExecutionEventType, PromptArtifact, ReplayMode
from models.digest import sha256_digest
from models.enums import DiffType
from runtime.manifests import capture_environment
from runtime.prompts import compile_prompt
from tests.workflows.test_replay_workflow import plan


async def _recorded_prompt(stack, run_id: str) -> PromptArtifact:
    events = await stack.stores.ledger.events_with_payloads(
        run_id, types=frozenset({ExecutionEventType.PROMPT_COMPILED})
    )
    return PromptArtifact.model_validate(json.loads(events[0][1]))


async def test_exact_sends_the_recorded_prompt_and_reports_prompt_drift(
    replay_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = replay_stack
    # the run is recorded with another injected tenant configuration than today's code has
    then = dataclasses.replace(
        support_agent.INJECTIONS,
        tenant_config={**support_agent.INJECTIONS.tenant_config, "language": "fr"},
    )
    with monkeypatch.context() as patched:
        patched.setattr(support_agent, "INJECTIONS", then)
        source = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=1
        )
    recorded = await _recorded_prompt(stack, source.run_id)
    recorded_text = (await stack.stores.artifacts.get(recorded.content_ref)).decode()
    assert '"language":"fr"' in recorded_text  # the recording stored its compiled prompt

    outcome = await stack.replay(plan(source.run_id, ReplayMode.EXACT))
    assert outcome.verdict.value == "REPRODUCED", outcome.verdict_reason
    drifts = [d for d in outcome.comparison.diffs if d.type is DiffType.PROMPT_DRIFT]
    assert len(drifts) == 1, outcome.comparison.diffs
    (drift,) = drifts
    assert drift.source_step == "planner"
    assert drift.source_prompt_hash == recorded.compiled_hash
    today = compile_prompt(
        support_agent.PROMPTS["v17"].template("planner"), support_agent.INJECTIONS
    )
    assert drift.replay_prompt_hash == sha256_digest(today.encode()) != recorded.compiled_hash
    assert '-{"currency":"EUR","language":"fr","tenant":"acme"}' in drift.prompt_diff
    assert '+{"currency":"EUR","language":"en","tenant":"acme"}' in drift.prompt_diff
    assert outcome.confidence.value == "LIMITED"
    # a drift is no behavioural divergence: the model was sent the recorded prompt
    assert outcome.comparison.first_divergent_step is None

    # what the replay sent is the recorded text, hash for hash
    sent = await _recorded_prompt(stack, outcome.replay_id)
    assert sent.compiled_hash == recorded.compiled_hash
    sent_text = await stack.stores.artifacts.get(sent.content_ref)
    assert sha256_digest(sent_text) == recorded.compiled_hash

    # the same run recorded with today's configuration: nothing drifts, FULL confidence
    same = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=1
    )
    clean = await stack.replay(plan(same.run_id, ReplayMode.EXACT))
    assert not [d for d in clean.comparison.diffs if d.type is DiffType.PROMPT_DRIFT]
    assert clean.confidence.value == "FULL" and clean.verdict.value == "REPRODUCED"


async def test_a_replay_worker_on_another_environment_reports_environment_drift(
    replay_stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = replay_stack

    def elsewhere(tool_bundle_hash: str | None = None):
        manifest = capture_environment(tool_bundle_hash)
        return manifest.model_copy(
            update={"python_version": "3.10.99", "dependency_lock_hash": "sha256:" + "0" * 64}
        )

    # recorded on another Python and another set of installed packages than the worker's
    with monkeypatch.context() as patched:
        patched.setattr(runtime.session, "capture_environment", elsewhere)
        source = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=4
        )
    outcome = await stack.replay(plan(source.run_id, ReplayMode.RECORDED))
    assert outcome.verdict.value == "REPRODUCED" and outcome.confidence.value == "LIMITED"
    (drift,) = [d for d in outcome.comparison.diffs if d.type is DiffType.ENVIRONMENT_DRIFT]
    assert "environment.python_version" in drift.explanation
    assert "environment.dependency_lock_hash" in drift.explanation
    assert "source_code" not in drift.explanation  # the same checkout: no code drift
