"""Forensics against ground truth: a recorded run's writes versus the writes it should have made.

A benchmark run (tau-bench) carries its ground truth: the write actions a correct agent makes
(name + arguments) and the facts it must tell the user. ``compare_expected`` lines the run's
successful write calls up against those actions and predicts the benchmark's verdict: pass
only if the writes match and every expected output appears in the agent's messages.

How two writes are "the same" is ``integrations.tau_bench.forensics_writes``; the records are
``integrations.tau_bench.forensics_records`` (re-exported here).

Failure signatures are stable names built from structured facts only (tool names, argument
names), never from ids or free text, so the same mistake aggregates across runs:

| signature | observed facts |
| --- | --- |
| ``EPISODE_UNFINISHED`` | the conversation was cut before it ended (step limit): never scored |
| ``WRITE_WRONG_ARGUMENTS`` | an expected write was made on the same target with other arguments |
| ``WRITE_WRONG_TARGET`` | the expected tool was called, but on another entity |
| ``WRITE_MISSING`` | an expected write was never made (nothing of that tool was attempted) |
| ``WRITE_MISSING_AFTER_ERROR`` | the expected write was attempted and only ever failed (``Error:``) |
| ``WRITE_UNEXPECTED`` | a write the ground truth does not contain changed the world |
| ``OUTPUT_MISSING`` | the writes match, an expected fact never reached the user |
| ``WORLD_STATE_DIFFERS`` | the writes look equivalent, the replayed world says otherwise |

The first row that applies wins; the others are listed in ``contributing``. The qualifier is
``tool(arg,...)`` so ``WRITE_WRONG_ARGUMENTS[update_reservation_flights(flights)]`` tells
what kind of argument the model got wrong.
"""

from __future__ import annotations

from typing import Any

from integrations.tau_bench.agentrx import predict_category
from integrations.tau_bench.forensics_records import (
    ExpectedAction,
    ExpectedComparison,
    Finding,
    ForensicsRun,
    ToolCallFact,
    WriteDiff,
)
from integrations.tau_bench.forensics_writes import (
    normalize_arguments,
    pair_leftovers,
    unmatched_writes,
)

__all__ = [
    "ExpectedAction",
    "ExpectedComparison",
    "Finding",
    "ForensicsRun",
    "ToolCallFact",
    "WriteDiff",
    "compare_expected",
    "duplicate_findings",
    "normalize_arguments",
    "output_found",
]


def duplicate_findings(run: ForensicsRun) -> tuple[Finding, ...]:
    """``SIDE_EFFECT_DUPLICATE`` for each write the run applied twice (models.duplicates):
    only writes that succeeded count, compared on their schema-normalised arguments."""
    from models.duplicates import duplicate_calls

    applied = [
        (c.name, normalize_arguments(c.arguments, run.schemas.get(c.name)), c.assistant_index)
        for c in run.calls
        if (c.is_write or c.name in run.write_tools) and not c.failed
    ]
    return tuple(
        Finding(
            code="SIDE_EFFECT_DUPLICATE",
            severity=d.severity,
            kind=d.kind,
            tool=d.capability_id,
            action_hash=d.action_hash,
            message_indexes=d.message_indexes,
            explanation=(
                f"{d.capability_id} applied {len(d.message_indexes)} times with the same "
                + ("arguments" if d.kind == "same_action" else "key arguments")
            ),
        )
        for d in duplicate_calls(applied)
    )


def output_found(output: str, texts: list[str]) -> bool:
    """The benchmark's rule: case-insensitive substring of a message with commas removed."""
    needle = output.lower()
    return any(needle in text.lower().replace(",", "") for text in texts)


def _qualifier(diff: WriteDiff) -> str:
    return f"{diff.name}({','.join(diff.arguments)})" if diff.arguments else diff.name


def _signature(
    comparison: dict[str, Any], attempted_failed: set[str], outputs_ok: bool
) -> tuple[str | None, str | None, tuple[str, ...]]:
    rows: list[tuple[str, str]] = []
    if comparison.get("finished") is False:
        rows.append(("EPISODE_UNFINISHED", "episode"))
    for d in comparison["differing"]:
        kind = "WRITE_WRONG_TARGET" if d.arguments == ("<target>",) else "WRITE_WRONG_ARGUMENTS"
        rows.append((kind, _qualifier(d) if kind == "WRITE_WRONG_ARGUMENTS" else d.name))
    for d in comparison["missing"]:
        kind = "WRITE_MISSING_AFTER_ERROR" if d.name in attempted_failed else "WRITE_MISSING"
        rows.append((kind, d.name))
    rows += [("WRITE_UNEXPECTED", d.name) for d in comparison["extra"]]
    if not rows and not outputs_ok:
        rows.append(("OUTPUT_MISSING", "outputs"))
    if not rows and comparison.get("world_state_matches") is False:
        rows.append(("WORLD_STATE_DIFFERS", "world"))
    if not rows:
        return None, None, ()
    signature, qualifier = rows[0]
    others = tuple(dict.fromkeys(r[0] for r in rows[1:] if r[0] != signature))
    return signature, f"{signature}[{qualifier}]", others


def _proposal(run: ForensicsRun, write_index: int) -> int:
    """The agent's message that laid a write out for confirmation, when the write directly
    follows "agent proposes, user confirms" (the policy of these domains): the wrong plan is
    visible there first. Otherwise the write's own message."""
    said = {i for i, _ in run.agent_texts}
    proposal = write_index - 2
    return proposal if proposal in said and write_index - 1 not in said else write_index


def _wrong_statement(run: ForensicsRun, outputs: dict[str, bool]) -> int | None:
    """The first agent message after a tool answer that states a value of the kind asked for
    (digits for a numeric expected output) without the expected value."""
    answered = {c.tool_index for c in run.calls if c.tool_index is not None}
    missing = [o for o, found in outputs.items() if not found]
    numeric = all(any(ch.isdigit() for ch in o) for o in missing)
    for i, text in run.agent_texts:
        if i - 1 not in answered:
            continue
        if (numeric and any(ch.isdigit() for ch in text)) or not numeric:
            return i
    return None


def _first_divergence(
    run: ForensicsRun, parts: dict[str, Any], outputs: dict[str, bool]
) -> int | None:
    """Where the run left the expected path (see _proposal, _wrong_statement); for a write never
    made, its first failed attempt, else the last thing the agent said (it ended without it)."""
    candidates = [
        _proposal(run, d.message_index)
        for d in [*parts["differing"], *parts["extra"]]
        if d.message_index is not None
    ]
    for d in parts["missing"]:
        failed = [c.assistant_index for c in run.calls if c.name == d.name and c.failed]
        if failed:
            candidates.append(_proposal(run, failed[0]))
    if candidates:
        return min(candidates)
    said = [i for i, _ in run.agent_texts]
    if not all(outputs.values()):
        statement = _wrong_statement(run, outputs)
        if statement is not None:
            return statement
    return said[-1] if said else None


def compare_expected(
    run: ForensicsRun, world_state_matches: bool | None = None
) -> ExpectedComparison:
    """Compare a run's successful writes with its expected actions and predict its outcome.

    ``world_state_matches`` (from a world replay, when one exists) overrides the argument
    comparison: the benchmark's verdict is the final state, and equal states are equal verdicts.
    """
    writes = [c for c in run.calls if c.is_write or c.name in run.write_tools]
    executed = [c for c in writes if not c.failed]
    attempted_failed = {c.name for c in writes if c.failed}
    actual = [
        (c.name, normalize_arguments(c.arguments, run.schemas.get(c.name)), c) for c in executed
    ]
    expected = [
        (a.name, normalize_arguments(a.arguments, run.schemas.get(a.name)), a)
        for a in run.expected_actions
        if a.name in run.write_tools
    ]
    left_expected, left_actual = unmatched_writes(expected, actual)
    missing, extra, differing = pair_leftovers(left_expected, left_actual, run.schemas)
    texts = [t for _, t in run.agent_texts]
    outputs = {o: output_found(o, texts) for o in run.expected_outputs}
    writes_match = not (missing or extra or differing)
    state_ok = writes_match if world_state_matches is None else world_state_matches
    finished_ok = run.finished is not False
    predicted = 1.0 if finished_ok and state_ok and all(outputs.values()) else 0.0
    parts = {
        "missing": missing,
        "extra": extra,
        "differing": differing,
        "world_state_matches": world_state_matches,
        "finished": run.finished,
    }
    if world_state_matches is True:
        # the world says the writes are equivalent: any textual difference is cosmetic
        parts.update(missing=[], extra=[], differing=[])
    signature, signature_key, contributing = _signature(
        parts, attempted_failed, all(outputs.values())
    )
    first_error = next((c.assistant_index for c in writes if c.failed), None)
    category = predict_category(
        signature,
        differing if world_state_matches is not True else [],
        [(c.tool_index, c.output) for c in run.calls if c.tool_index is not None and c.output],
        [c.name for c in run.calls],
    )
    divergence = None
    if predicted == 0.0:
        divergence = _first_divergence(run, parts, outputs)
    return ExpectedComparison(
        run_id=run.run_id,
        domain=run.domain,
        task_id=run.task_id,
        trial=run.trial,
        recorded_reward=run.recorded_reward,
        writes_executed=len(executed),
        writes_failed=len(writes) - len(executed),
        writes_match=writes_match,
        missing=tuple(missing),
        extra=tuple(extra),
        differing=tuple(differing),
        outputs=outputs,
        first_divergent_message_index=divergence,
        first_error_write_index=first_error,
        world_state_matches=world_state_matches,
        finished=run.finished,
        predicted_reward=predicted,
        signature=signature,
        signature_key=signature_key,
        contributing=contributing,
        findings=duplicate_findings(run),
        category=category,
        category_step=None if category is None or divergence is None else divergence + 1,
    )
