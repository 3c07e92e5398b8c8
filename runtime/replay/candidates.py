"""Candidates for an agent Replaybook did not write: a tool-loop run's compiled system prompt and
tool catalogue, swapped in by artifact digest (``ReplayPlan.candidate_system_prompt``,
``candidate_tools``). The engine checks them while PREPARING, pins their digests in the
manifest and records in the replay's RUN_STARTED what was swapped and how it differs (a
unified diff, source → candidate), which the trajectory turns into a ``CANDIDATE_CHANGED``
difference for the comparison and the report's side-by-side view."""

from __future__ import annotations

import difflib
import json
from typing import Any

from models.ingest import TOOL_LOOP_GRAPH_ID
from models.replay_flow import ReplayPlan
from runtime.ports import ArtifactStore
from runtime.replay.prompt_drift import MAX_DIFF_CHARS

#: candidate kind → the tool loop's input key it replaces, and what it is called
SWAPS = (
    ("system_prompt", "system_prompt_ref", "candidate system prompt"),
    ("tools", "tools_ref", "candidate tool catalogue"),
)


def _swapped(plan: ReplayPlan) -> list[tuple[str, str, str, str]]:
    refs = {"system_prompt": plan.candidate_system_prompt, "tools": plan.candidate_tools}
    return [(kind, key, name, refs[kind]) for kind, key, name in SWAPS if refs[kind]]  # type: ignore[misc]


async def candidate_problems(
    artifacts: ArtifactStore, plan: ReplayPlan, graph_id: str
) -> list[str]:
    """Why the plan's candidates cannot be replayed: they apply to a tool-loop run only (an
    agent built on this runtime swaps its prompt bundle, ``--prompt``), and their artifacts
    must be in the store."""
    problems = []
    for _, _, name, ref in _swapped(plan):
        if graph_id != TOOL_LOOP_GRAPH_ID:
            problems.append(
                f"a {name} applies to a tool-loop run (ingested or imported); run "
                f"{plan.source_run_id} is {graph_id}: swap its prompt bundle instead"
            )
        elif not await artifacts.exists(ref):
            problems.append(f"the {name} {ref} is not in the artifact store")
    return problems


def _readable(kind: str, data: bytes) -> str:
    """A text to diff: a tool catalogue pretty-printed (one key per line), a prompt as is."""
    text = data.decode("utf-8", errors="replace")
    if kind == "tools":
        try:
            return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        except ValueError:
            return text
    return text


def _unified(before: str, after: str) -> str:
    text = "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile="recorded",
            tofile="candidate",
        )
    )
    if len(text) <= MAX_DIFF_CHARS:
        return text
    return text[:MAX_DIFF_CHARS] + f"\n… ({len(text) - MAX_DIFF_CHARS} more characters)\n"


async def candidate_facts(
    artifacts: ArtifactStore, plan: ReplayPlan, agent_input: Any
) -> list[dict[str, Any]]:
    """What RUN_STARTED records for each candidate (``models.trajectory.CandidateFact``):
    the source's and the candidate's digests and their unified diff."""
    facts = []
    for kind, key, _, ref in _swapped(plan):
        source = agent_input.get(key) if isinstance(agent_input, dict) else None
        before = _readable(kind, await artifacts.get(source)) if source else ""
        after = _readable(kind, await artifacts.get(ref))
        facts.append(
            {
                "kind": kind,
                "source_hash": source,
                "candidate_hash": ref,
                "diff": _unified(before, after),
            }
        )
    return facts
