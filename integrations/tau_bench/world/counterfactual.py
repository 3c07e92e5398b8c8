"""The benchmark's own verdict on a conversation a replay produced: would this agent have
passed the task? (issue 18, item 6: the end of a tau-bench model-swap replay.)

The replayed conversation's tool calls are executed, in order, by our world tools on a private
copy of the database version the source run was recorded against (``World``: the shared base
is never written; each changed record is copied first), then tau-bench's rule is applied:
reward 1 when the episode ended, the final database hash equals the hash after the task's
ground-truth actions, and every required output was said to the user; 0 otherwise, with the
reason. A replay Replaybook itself stopped before the episode's end (its cap on model calls,
its budget, a fixture miss) is not scored at all: the benchmark never saw that truncation, so
it is no benchmark result (INCONCLUSIVE, left out of ``counterfactual_scored``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from integrations.tau_bench.forensics import ForensicsRun, output_found
from integrations.tau_bench.trajectory import agent_texts, episode_finished, tool_calls
from integrations.tau_bench.world.db import DomainData
from integrations.tau_bench.world.replay import replay_run

__all__ = ["CounterfactualVerdict", "counterfactual_verdict"]


class CounterfactualVerdict(BaseModel):
    #: 1 or 0 as the benchmark scores the episode; None: not scored (Replaybook stopped it)
    counterfactual_reward: int | None
    reason: str
    db_version: str
    final_hash: str
    expected_hash: str
    missing_outputs: list[str]
    finished: bool
    #: calls that changed the private copy (the shared base never changes)
    mutating_calls: int

    def summary(self) -> dict[str, Any]:
        return self.model_dump()


def counterfactual_verdict(
    source: ForensicsRun,
    messages: list[dict[str, Any]],
    base: DomainData,
    *,
    stopped: str | None = None,
) -> CounterfactualVerdict:
    """The verdict on ``messages`` (OpenAI chat messages of the replayed conversation, without
    the system prompt) for ``source``'s task, on a private copy of ``base``. ``stopped``: why
    Replaybook stopped the replay before the episode's end (its cap on model calls, its
    budget…): the episode is then not scored (reward None). Reaching the benchmark's own step
    limit (the run's recorded limit) is no such stop: the benchmark scores that 0."""
    calls = tool_calls(messages, set(source.write_tools))
    replayed = source.model_copy(
        update={
            "calls": tuple(calls),
            "agent_texts": agent_texts(messages),
            "finished": episode_finished(messages, calls),
            "n_messages": len(messages),
        }
    )
    world = replay_run(replayed, base, with_expected=True)
    assert world.expected_hash is not None
    texts = [t for _, t in replayed.agent_texts]
    missing = [o for o in source.expected_outputs if not output_found(o, texts)]
    finished = replayed.finished is not False and stopped is None
    state_ok = world.final_hash == world.expected_hash
    if stopped is not None:
        reason = (
            f"not scored: Replaybook stopped the replay before the episode's end ({stopped}); "
            "a truncation by Replaybook's own limits is no benchmark result (INCONCLUSIVE)"
        )
    elif not finished:
        reason = "the episode did not reach its end (never scored)"
    elif not state_ok:
        reason = (
            f"final database hash {world.final_hash[:12]} differs from the ground truth's "
            f"{world.expected_hash[:12]}"
        )
    elif missing:
        reason = f"required outputs not said to the user: {', '.join(map(repr, missing))}"
    else:
        outputs = f" and all {len(source.expected_outputs)} required outputs present"
        reason = "final database hash equals the ground truth's" + (
            outputs if source.expected_outputs else ""
        )
    return CounterfactualVerdict(
        counterfactual_reward=None
        if stopped is not None
        else int(finished and state_ok and not missing),
        reason=reason,
        db_version=base.version,
        final_hash=world.final_hash,
        expected_hash=world.expected_hash,
        missing_outputs=missing,
        finished=finished,
        mutating_calls=sum(c.mutated for c in world.calls),
    )
