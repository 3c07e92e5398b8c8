"""Behavioural equivalence of a replay with its source run (rule 13).

``compare_trajectories`` reduces two ``Trajectory`` objects to a ``ReplayComparison``: four
summary judgements (outcome, tool sequence, side effects, answer wording) and typed,
explained ``TrajectoryDiff`` items in execution order. A difference is a result, never an error.

How the two runs are aligned:

- model decisions: by position (the n-th model call of each run); only the first one that
  differs is reported (later ones usually follow from it);
- tool calls: by capability sequence (``difflib`` alignment; for long runs the common prefix
  and suffix first, see ``models.comparison_align``), so one extra or missing call does not
  make every later call look changed; aligned calls whose request hash differs are
  ``ARGUMENT_CHANGED``, unaligned ones ``TOOL_CHANGED``;
- policy decisions: the same policy on the same input first (a different verdict is a changed
  policy), then remaining ones with the same verdict (an input change, reported elsewhere), then
  the same policy in the same step (a different verdict on another input); leftovers are
  decisions one run made and the other did not;
- side effects: identical ``(capability, action hash)`` first, then the same capability in the
  same step (``SIDE_EFFECT_CHANGED``); leftovers are ``SIDE_EFFECT_REMOVED`` (source only) or
  ``SIDE_EFFECT_ADDED`` (replay only). Every side-effect diff is critical. Statuses are not
  compared: a replay's writes are blocked by design.

Explanations are one line and name what changed (capabilities, changed argument values when
they are short), never whole payloads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from models.canonical import canonicalize
from models.comparison_align import LazyPositions, capability_opcodes, match_by_key
from models.comparison_evidence import (
    approval_diffs,
    candidate_diffs,
    prompt_drift_diffs,
    retrieval_diffs,
)
from models.comparison_text import (
    MAX_SHOWN,
    answer_change,
    answer_similarity,
    argument_change,
    call_text,
    changed_keys,
    one_line,
    quoted,
    short,
    tool_names,
)
from models.cycle_pause import cycle_collection_paused
from models.enums import DiffType
from models.errors import CanonicalizationError
from models.replay import ReplayComparison, TrajectoryDiff
from models.trajectory import ModelDecision, PolicyFact, SideEffectFact, ToolCallFact, Trajectory

__all__ = ["answer_similarity", "compare_trajectories", "reproduces"]


# order of diffs within one step, as its events are recorded: the model's output, policy
# decisions, the side effect (PLANNED before the provider is called), then the tool call
_RANK = {
    DiffType.MODEL_DECISION_CHANGED: 0,
    DiffType.ANSWER_CHANGED: 0,
    DiffType.POLICY_CHANGED: 1,
    DiffType.SIDE_EFFECT_CHANGED: 2,
    DiffType.SIDE_EFFECT_REMOVED: 2,
    DiffType.SIDE_EFFECT_ADDED: 2,
    DiffType.TOOL_CHANGED: 3,
    DiffType.ARGUMENT_CHANGED: 3,
    DiffType.OUTCOME_CHANGED: 4,
    # what the step was given before it acted: retrieved evidence, then an approval
    DiffType.RETRIEVAL_CHANGED: 0,
    DiffType.APPROVAL_CHANGED: 1,
    # after the behavioural diffs (see compare_trajectories), or added by the replay workflow
    DiffType.PROMPT_DRIFT: 0,
    DiffType.ENVIRONMENT_DRIFT: 4,
    DiffType.CANDIDATE_CHANGED: 0,
}
_AFTER_ALL = 1 << 62  # the outcome comes after every step


@dataclass(frozen=True)
class _Found:
    diff: TrajectoryDiff
    position: int  # index into the run's step sequence: execution order
    serial: int = 0


# alignment helpers --------------------------------------------------------------------------


_positions = LazyPositions  # the name the callers below use


def _pair(first: str, second: str) -> str:
    """Two ids as one unambiguous string key (the first's length first). Not a tuple: the
    matching keeps its keys, and thousands of live tuples make the garbage collector's full
    passes (over the whole heap, two long trajectories included) run again and again; a long
    comparison grew 15-18x for 10x the steps with them."""
    return f"{len(first)}:{first}{second}"


def _same_tool_sequence(a: Sequence[ToolCallFact], b: Sequence[ToolCallFact]) -> bool:
    """The same ``(capability, request hash)`` sequence, compared field by field (lists of
    strings: no tuple per call, see ``_pair``)."""
    return [t.capability_id for t in a] == [t.capability_id for t in b] and [
        t.request_hash for t in a
    ] == [t.request_hash for t in b]


# the diffs ----------------------------------------------------------------------------------


def _model_decision_diff(
    a: Sequence[ModelDecision], b: Sequence[ModelDecision], pa: Sequence[int], pb: Sequence[int]
) -> _Found | None:
    for i, (da, db) in enumerate(zip_longest(a, b)):
        if (
            da is not None
            and db is not None
            and (da.tool_names, da.argument_hashes) == (db.tool_names, db.argument_hashes)
        ):
            continue
        if da is None:
            text = (
                f"the replay made an extra model call at {db.step_id} ({tool_names(db.tool_names)})"
            )
        elif db is None:
            text = (
                f"the replay made no model call like the one at {da.step_id} "
                f"({tool_names(da.tool_names)})"
            )
        elif da.tool_names != db.tool_names:
            removed = list((Counter(da.tool_names) - Counter(db.tool_names)).elements())
            added = list((Counter(db.tool_names) - Counter(da.tool_names)).elements())
            if removed and added:
                change = f"{tool_names(removed)} became {tool_names(added)}"
            elif added:
                change = f"also asked for {tool_names(added)}"
            elif removed:
                change = f"no longer asked for {tool_names(removed)}"
            else:
                change = f"asked for the same tools in another order ({tool_names(db.tool_names)})"
            text = f"model at {da.step_id}: {change}"
        else:
            changed = [
                name
                for name, ha, hb in zip_longest(
                    da.tool_names, da.argument_hashes, db.argument_hashes
                )
                if ha != hb
            ]
            text = (
                f"model at {da.step_id} asked for {tool_names([n or '?' for n in changed])} "
                "with other arguments"
            )
        diff = TrajectoryDiff(
            type=DiffType.MODEL_DECISION_CHANGED,
            source_step=da.step_id if da is not None else None,
            replay_step=db.step_id if db is not None else None,
            explanation=text,
        )
        return _Found(diff, pa[i] if da is not None else pb[i])
    return None


def _tool_diffs(
    a: Sequence[ToolCallFact], b: Sequence[ToolCallFact], pa: Sequence[int], pb: Sequence[int]
) -> list[_Found]:
    found: list[_Found] = []
    opcodes = capability_opcodes([t.capability_id for t in a], [t.capability_id for t in b])
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            for i, j in zip(range(i1, i2), range(j1, j2), strict=True):
                ta, tb = a[i], b[j]
                if ta.request_hash != tb.request_hash:
                    text = argument_change(
                        ta.capability_id,
                        ta.arguments,
                        tb.arguments,
                        ta.request_hash,
                        tb.request_hash,
                    )
                    found.append(
                        _Found(
                            TrajectoryDiff(
                                type=DiffType.ARGUMENT_CHANGED,
                                source_step=ta.step_id,
                                replay_step=tb.step_id,
                                explanation=text,
                            ),
                            pa[i],
                        )
                    )
            continue
        for i, j in zip_longest(range(i1, i2), range(j1, j2)):
            src = a[i] if i is not None else None
            rep = b[j] if j is not None else None
            if src is not None and rep is not None:
                text = f"{call_text(src.capability_id, src.arguments)} became {call_text(rep.capability_id, rep.arguments)}"
            elif src is not None:
                text = f"the replay did not call {call_text(src.capability_id, src.arguments)}"
            else:
                assert rep is not None
                text = f"the replay also called {call_text(rep.capability_id, rep.arguments)}"
            diff = TrajectoryDiff(
                type=DiffType.TOOL_CHANGED,
                source_step=src.step_id if src is not None else None,
                replay_step=rep.step_id if rep is not None else None,
                explanation=text,
            )
            found.append(_Found(diff, pa[i] if i is not None else pb[j]))
    return found


def _same_policy_sequence(a: Sequence[PolicyFact], b: Sequence[PolicyFact]) -> bool:
    """The same policies on the same inputs with the same verdicts, in the same order (a
    replay that reproduces): matching would pair each decision with its twin and report
    nothing. Field by field in lists of strings, as ``_same_tool_sequence``."""
    return (
        len(a) == len(b)
        and [p.input_hash for p in a] == [p.input_hash for p in b]
        and [p.policy_id for p in a] == [p.policy_id for p in b]
        and [p.decision for p in a] == [p.decision for p in b]
    )


def _policy_diffs(
    a: Sequence[PolicyFact], b: Sequence[PolicyFact], pa: Sequence[int], pb: Sequence[int]
) -> list[_Found]:
    if _same_policy_sequence(a, b):  # what matching would find: each with its twin, no diff
        return []
    free_a, free_b = set(range(len(a))), set(range(len(b)))
    same_input = match_by_key(a, b, lambda x: _pair(x.policy_id, x.input_hash), free_a, free_b)
    # another input with the same verdict: the input change is reported by other diffs
    match_by_key(a, b, lambda x: _pair(x.policy_id, x.decision), free_a, free_b)
    other_input = match_by_key(a, b, lambda x: _pair(x.policy_id, x.step_id), free_a, free_b)
    found: list[_Found] = []
    for pairs, how in ((same_input, "on the same input"), (other_input, "on another input")):
        for i, j in pairs:
            pa_, pb_ = a[i], b[j]
            if pa_.decision == pb_.decision:
                continue
            text = f"{pa_.policy_id} at {pa_.step_id}: {pa_.decision} became {pb_.decision} {how}"
            diff = TrajectoryDiff(
                type=DiffType.POLICY_CHANGED,
                source_step=pa_.step_id,
                replay_step=pb_.step_id,
                explanation=text,
            )
            found.append(_Found(diff, pa[i]))
    for i in sorted(free_a):
        text = f"the replay made no {a[i].policy_id} decision like the source's {a[i].decision} at {a[i].step_id}"
        diff = TrajectoryDiff(
            type=DiffType.POLICY_CHANGED, source_step=a[i].step_id, explanation=text
        )
        found.append(_Found(diff, pa[i]))
    for j in sorted(free_b):
        text = (
            f"the replay made an extra {b[j].policy_id} decision: {b[j].decision} at {b[j].step_id}"
        )
        diff = TrajectoryDiff(
            type=DiffType.POLICY_CHANGED, replay_step=b[j].step_id, explanation=text
        )
        found.append(_Found(diff, pb[j]))
    return found


def _side_effect_diffs(
    a: Sequence[SideEffectFact], b: Sequence[SideEffectFact], pa: Sequence[int], pb: Sequence[int]
) -> list[_Found]:
    free_a, free_b = set(range(len(a))), set(range(len(b)))
    match_by_key(a, b, lambda x: _pair(x.capability_id, x.action_hash), free_a, free_b)
    changed = match_by_key(a, b, lambda x: _pair(x.capability_id, x.step_id), free_a, free_b)
    found: list[_Found] = []
    for i, j in changed:
        ea, eb = a[i], b[j]
        text = argument_change(
            ea.capability_id, ea.arguments, eb.arguments, ea.action_hash, eb.action_hash
        )
        diff = TrajectoryDiff(
            type=DiffType.SIDE_EFFECT_CHANGED,
            source_step=ea.step_id,
            replay_step=eb.step_id,
            explanation=text,
            critical=True,
        )
        found.append(_Found(diff, pa[i]))
    for i in sorted(free_a):
        e = a[i]
        text = f"{call_text(e.capability_id, e.arguments)} ({e.status} in the source) was not attempted by the replay"
        diff = TrajectoryDiff(
            type=DiffType.SIDE_EFFECT_REMOVED,
            source_step=e.step_id,
            explanation=text,
            critical=True,
        )
        found.append(_Found(diff, pa[i]))
    for j in sorted(free_b):
        e = b[j]
        text = f"the replay attempted {call_text(e.capability_id, e.arguments)} ({e.status}), not in the source"
        diff = TrajectoryDiff(
            type=DiffType.SIDE_EFFECT_ADDED, replay_step=e.step_id, explanation=text, critical=True
        )
        found.append(_Found(diff, pb[j]))
    return found


def _canonical(value: Any) -> bytes:
    try:
        return canonicalize(value)
    except CanonicalizationError:
        return b"\x00" + repr(value).encode()  # never equal to canonical JSON


def _same_outcome(source: Trajectory, replay: Trajectory) -> bool:
    return source.completed == replay.completed and _canonical(source.outcome) == _canonical(
        replay.outcome
    )


def _run_state(t: Trajectory) -> str:
    if t.completed:
        return "completed"
    if isinstance(t.outcome, dict) and t.outcome.get("error"):
        return f"failed ({one_line(str(t.outcome['error']))})"
    return "did not finish"


def _outcome_change(source: Trajectory, replay: Trajectory) -> str:
    before, after = source.outcome, replay.outcome
    if source.completed != replay.completed:
        return f"the source {_run_state(source)}, the replay {_run_state(replay)}"
    if isinstance(before, dict) and isinstance(after, dict):
        changed = changed_keys(before, after)
        shown = [
            k
            for k in changed
            if short(before.get(k)) is not None and short(after.get(k)) is not None
        ][:MAX_SHOWN]
        parts = [f"{k} {quoted(before.get(k))} became {quoted(after.get(k))}" for k in shown]
        rest = [k for k in changed if k not in shown]
        if rest:
            parts.append(f"also changed: {', '.join(rest[:3])}" + (" …" if len(rest) > 3 else ""))
        return "outcome: " + "; ".join(parts)
    return f"outcome {one_line(quoted(before))} became {one_line(quoted(after))}"


def _last_answer(decisions: Sequence[ModelDecision]) -> int | None:
    for i in range(len(decisions) - 1, -1, -1):
        if (decisions[i].content or "").strip():
            return i
    return None


# public -------------------------------------------------------------------------------------


def compare_trajectories(source: Trajectory, replay: Trajectory) -> ReplayComparison:
    """Compare a replay with its source run (see the module docstring for the alignment).

    - ``same_outcome``: both finished the same way (completed or not) with canonically equal
      outcomes;
    - ``same_tool_sequence``: the same ``(capability, request hash)`` sequence;
    - ``same_side_effects``: the same multiset of ``(capability, action hash)`` writes (executed
      in the source, attempted-and-blocked in a replay);
    - ``answer_similarity``: ``answer_similarity(source.final_answer, replay.final_answer)``;
    - ``first_divergent_step``: the step of the earliest diff in execution order (its source
      step, else its replay step), None when there is no diff.

    The cyclic collector is held off meanwhile (``models.cycle_pause``): its full passes over a
    heap holding long trajectories doubled a long diverging comparison's time every other call.
    """
    with cycle_collection_paused():
        return _compare(source, replay)


def _compare(source: Trajectory, replay: Trajectory) -> ReplayComparison:
    found = _behaviour_diffs(source, replay)
    similarity = answer_similarity(source.final_answer, replay.final_answer)
    if similarity < 1.0:
        found.append(_answer_diff(source, replay, similarity))
    same_outcome = _same_outcome(source, replay)
    if not same_outcome:
        diff = TrajectoryDiff(
            type=DiffType.OUTCOME_CHANGED,
            source_step=source.steps[-1] if source.steps else None,
            replay_step=replay.steps[-1] if replay.steps else None,
            explanation=_outcome_change(source, replay),
        )
        found.append(_Found(diff, _AFTER_ALL))
    diffs = _in_execution_order(found)
    # an EXACT replay sent the recorded prompts: a drift is no divergence, it is reported after
    drift = tuple(prompt_drift_diffs(replay.prompt_drifts))
    # the candidates the replay was given, first: what it was asked to try
    drift = tuple(candidate_diffs(replay.candidates)) + drift
    return ReplayComparison(
        same_outcome=same_outcome,
        same_tool_sequence=_same_tool_sequence(source.tool_calls, replay.tool_calls),
        same_side_effects=Counter((e.capability_id, e.action_hash) for e in source.side_effects)
        == Counter((e.capability_id, e.action_hash) for e in replay.side_effects),
        answer_similarity=similarity,
        diffs=diffs + drift,
        first_divergent_step=_first_step(diffs),
    )


def _behaviour_diffs(source: Trajectory, replay: Trajectory) -> list[_Found]:
    """Model decision, policy, tool and side-effect differences, each at its position."""
    src_models = _positions(source.steps, (d.step_id for d in source.model_decisions))
    rep_models = _positions(replay.steps, (d.step_id for d in replay.model_decisions))
    found: list[_Found] = []
    decision = _model_decision_diff(
        source.model_decisions, replay.model_decisions, src_models, rep_models
    )
    if decision is not None:
        found.append(decision)
    found += _policy_diffs(
        source.policy_decisions,
        replay.policy_decisions,
        _positions(source.steps, (p.step_id for p in source.policy_decisions)),
        _positions(replay.steps, (p.step_id for p in replay.policy_decisions)),
    )
    found += _tool_diffs(
        source.tool_calls,
        replay.tool_calls,
        _positions(source.steps, (t.step_id for t in source.tool_calls)),
        _positions(replay.steps, (t.step_id for t in replay.tool_calls)),
    )
    found += _side_effect_diffs(
        source.side_effects,
        replay.side_effects,
        _positions(source.steps, (e.step_id for e in source.side_effects)),
        _positions(replay.steps, (e.step_id for e in replay.side_effects)),
    )
    for diffs in (
        approval_diffs(
            source.approvals,
            replay.approvals,
            _positions(source.steps, (a.step_id for a in source.approvals)),
            _positions(replay.steps, (a.step_id for a in replay.approvals)),
        ),
        retrieval_diffs(
            source.retrievals,
            replay.retrievals,
            _positions(source.steps, (r.step_id for r in source.retrievals)),
            _positions(replay.steps, (r.step_id for r in replay.retrievals)),
        ),
    ):
        found += [_Found(diff, position) for diff, position in diffs]
    return found


def _answer_diff(source: Trajectory, replay: Trajectory, similarity: float) -> _Found:
    """``ANSWER_CHANGED`` at the last answering model decision of either run."""
    src_models = _positions(source.steps, (d.step_id for d in source.model_decisions))
    rep_models = _positions(replay.steps, (d.step_id for d in replay.model_decisions))
    ia, ib = _last_answer(source.model_decisions), _last_answer(replay.model_decisions)
    diff = TrajectoryDiff(
        type=DiffType.ANSWER_CHANGED,
        source_step=source.model_decisions[ia].step_id if ia is not None else None,
        replay_step=replay.model_decisions[ib].step_id if ib is not None else None,
        explanation=answer_change(source.final_answer, replay.final_answer, similarity),
    )
    position = src_models[ia] if ia is not None else rep_models[ib] if ib is not None else 0
    return _Found(diff, position)


def _in_execution_order(found: list[_Found]) -> tuple[TrajectoryDiff, ...]:
    """Diffs by position, then by type rank, then in the order they were found."""
    ordered = sorted(
        (_Found(f.diff, f.position, n) for n, f in enumerate(found)),
        key=lambda f: (f.position, _RANK[f.diff.type], f.serial),
    )
    return tuple(f.diff for f in ordered)


def _first_step(diffs: tuple[TrajectoryDiff, ...]) -> str | None:
    """The step of the earliest diff: its source step, else its replay step."""
    return next(
        (
            d.source_step if d.source_step is not None else d.replay_step
            for d in diffs
            if d.source_step is not None or d.replay_step is not None
        ),
        None,
    )


def reproduces(comparison: ReplayComparison) -> bool:
    """Whether a replay reproduced the incident's behaviour: the same outcome
    (``same_outcome``: finished the same way, canonically equal outcome) AND the same side
    effects (``same_side_effects``: the same multiset of ``(capability, action hash)`` writes,
    executed in the source, attempted in the replay).

    The tool sequence, policy verdicts and the answer's wording are not part of it: a replay
    that reaches the same result and the same writes by another path still reproduces the
    incident (those differences are in ``comparison.diffs``).
    """
    return comparison.same_outcome and comparison.same_side_effects
