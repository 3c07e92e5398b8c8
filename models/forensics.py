"""Forensics against ground truth: a recorded run's writes versus the writes it should have made.

A benchmark run (tau-bench) carries its ground truth: the write actions a correct agent makes
(name + arguments) and the facts it must tell the user. ``compare_expected`` lines the run's
successful write calls up against those actions and predicts the benchmark's verdict: pass
only if the writes match and every expected output appears in the agent's messages.

How two writes are "the same" (canonical arguments, honouring what the recorded data showed):

- a write whose output starts with ``Error:`` changed nothing, so it is not a write at all;
- arguments are compared as canonical JSON (RFC 8785: key order and ``1`` vs ``1.0`` do not
  matter), after dropping object properties the tool's schema does not declare (the tool
  ignores them: an agent that also sends a flight's ``origin`` sends the same request);
- an ``*_ids`` list is a multiset (order carries no meaning, duplicates do), and a
  ``new_<x>_ids`` list is paired position by position with its ``<x>_ids`` list, so the pairs
  are sorted together; a pair that maps an id onto itself changes nothing and is dropped;
- arguments are copied before anything is compared or executed: tools have been seen to keep
  a caller's list inside their database and mutate it later (aliasing).

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

import copy
from collections import Counter
from typing import Any

from pydantic import Field, JsonValue

from models.agentrx import predict_category
from models.base import Record
from models.canonical import canonical_hash, normalize_json

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

ERROR_PREFIX = "Error:"


class ToolCallFact(Record):
    """One tool call of a run and its recorded answer (positions are 0-based message indexes)."""

    assistant_index: int
    tool_index: int | None = None
    call_id: str | None = None
    name: str
    arguments: JsonValue = None
    #: the arguments could not be parsed as a JSON object (the tool then ran on nothing)
    arguments_invalid: bool = False
    output: str | None = None
    is_write: bool = False

    @property
    def failed(self) -> bool:
        """The tool refused the call: a failed write changed nothing."""
        return (self.output or "").startswith(ERROR_PREFIX) or self.arguments_invalid


class ExpectedAction(Record):
    name: str
    arguments: JsonValue


class ForensicsRun(Record):
    """Everything compare_expected needs about one run: pure data, no store, no files."""

    run_id: str
    domain: str
    task_id: str
    trial: int = 0
    calls: tuple[ToolCallFact, ...] = ()
    #: (message index, text) of every assistant message with text: what the user was told
    agent_texts: tuple[tuple[int, str], ...] = ()
    expected_actions: tuple[ExpectedAction, ...] = ()
    expected_outputs: tuple[str, ...] = ()
    write_tools: tuple[str, ...] = ()
    #: tool name -> its parameters' JSON schema (used to drop undeclared properties)
    schemas: dict[str, JsonValue] = Field(default_factory=dict)
    recorded_reward: float | None = None
    #: the benchmark commit whose databases the run was recorded against (import metadata)
    env_version: str | None = None
    n_messages: int = 0
    #: the episode reached its end (user stopped, or handed to a human); an unfinished one is
    #: never scored, so it cannot pass (None: unknown, treated as finished)
    finished: bool | None = None


class WriteDiff(Record):
    kind: str  # "missing" | "extra" | "differing"
    name: str
    expected: JsonValue = None
    actual: JsonValue = None
    #: argument names whose values differ (differing only)
    arguments: tuple[str, ...] = ()
    #: assistant message of the actual write (extra, differing)
    message_index: int | None = None


class Finding(Record):
    """A critical fact about the run's writes, reported whatever the predicted verdict."""

    code: str
    severity: str
    #: ``same_action`` or ``same_key_arguments`` (models.duplicates)
    kind: str
    tool: str
    action_hash: str
    #: 0-based message indexes of the assistant messages that made the writes
    message_indexes: tuple[int, ...]
    explanation: str


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


class ExpectedComparison(Record):
    run_id: str
    domain: str
    task_id: str
    trial: int
    recorded_reward: float | None
    writes_executed: int
    writes_failed: int
    writes_match: bool
    missing: tuple[WriteDiff, ...] = ()
    extra: tuple[WriteDiff, ...] = ()
    differing: tuple[WriteDiff, ...] = ()
    outputs: dict[str, bool] = Field(default_factory=dict)
    #: the first message where the run left the path to the expected outcome (0-based)
    first_divergent_message_index: int | None = None
    #: baseline for localisation: the first write whose output starts with ``Error:``
    first_error_write_index: int | None = None
    #: the replayed world's final state equals the expected actions' final state (None: no world)
    world_state_matches: bool | None = None
    finished: bool | None = None
    predicted_reward: float
    signature: str | None = None
    signature_key: str | None = None
    contributing: tuple[str, ...] = ()
    #: critical findings beside the verdict: ``SIDE_EFFECT_DUPLICATE`` per duplicated write
    findings: tuple[Finding, ...] = ()
    #: the predicted root cause in the AgentRx taxonomy (models.agentrx) and its step, as
    #: AgentRx numbers steps (1-based message index): None when the run is predicted to pass
    category: str | None = None
    category_step: int | None = None


def _schema_properties(schema: Any) -> dict[str, Any] | None:
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        return schema["properties"]
    return None


def _prune(value: Any, schema: Any) -> Any:
    """Drop object properties the schema does not declare; recurse into declared ones."""
    props = _schema_properties(schema)
    if isinstance(value, dict) and props is not None:
        return {k: _prune(v, props[k]) for k, v in value.items() if k in props}
    if isinstance(value, list) and isinstance(schema, dict) and "items" in schema:
        return [_prune(v, schema["items"]) for v in value]
    return value


def _sort_key(value: Any) -> str:
    return canonical_hash(value)


def normalize_arguments(arguments: Any, schema: Any = None) -> Any:
    """The canonical form two equivalent write requests share (see the module docstring)."""
    if not isinstance(arguments, dict):
        return normalize_json(copy.deepcopy(arguments))
    args = normalize_json(_prune(copy.deepcopy(arguments), schema))
    for key in list(args):
        new_key = f"new_{key}"
        if key.endswith("_ids") and isinstance(args.get(new_key), list):
            old, new = args[key], args[new_key]
            if isinstance(old, list) and len(old) == len(new):
                pairs = sorted(
                    ((o, n) for o, n in zip(old, new, strict=True) if o != n), key=_sort_key
                )
                args[key], args[new_key] = [p[0] for p in pairs], [p[1] for p in pairs]
        elif key.endswith("_ids") and isinstance(args[key], list) and not key.startswith("new_"):
            args[key] = sorted(args[key], key=_sort_key)
    return args


def output_found(output: str, texts: list[str]) -> bool:
    """The benchmark's rule: case-insensitive substring of a message with commas removed."""
    needle = output.lower()
    return any(needle in text.lower().replace(",", "") for text in texts)


def _target(arguments: Any, schema: Any) -> Any:
    """The entity a write acts on: its first required ``*_id`` argument."""
    if not isinstance(arguments, dict):
        return None
    required = schema.get("required", []) if isinstance(schema, dict) else []
    for key in [*required, *sorted(arguments)]:
        if key.endswith("_id") and key in arguments:
            return (key, arguments[key])
    return None


def _differing_args(expected: Any, actual: Any) -> tuple[str, ...]:
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return ("*",)
    keys = sorted(set(expected) | set(actual))
    return tuple(k for k in keys if expected.get(k) != actual.get(k))


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


def _pair_leftovers(
    missing: list[tuple[str, Any, Any]], extra: list[tuple[str, Any, ToolCallFact]], schemas: dict
) -> tuple[list[WriteDiff], list[WriteDiff], list[WriteDiff]]:
    """Pair an unmatched expected write with an unmatched actual one of the same tool, same
    target first, then any target (reported as a wrong target)."""
    differing: list[WriteDiff] = []
    for same_target in (True, False):
        for m in list(missing):
            name, norm_expected, _ = m
            schema = schemas.get(name)
            for e in extra:
                if e[0] != name:
                    continue
                target_equal = _target(norm_expected, schema) == _target(e[1], schema)
                if target_equal != same_target:
                    continue
                args = _differing_args(norm_expected, e[1]) if same_target else ("<target>",)
                differing.append(
                    WriteDiff(
                        kind="differing",
                        name=name,
                        expected=norm_expected,
                        actual=e[1],
                        arguments=args,
                        message_index=e[2].assistant_index,
                    )
                )
                missing.remove(m)
                extra.remove(e)
                break
    missing_diffs = [WriteDiff(kind="missing", name=n, expected=a) for n, a, _ in missing]
    extra_diffs = [
        WriteDiff(kind="extra", name=n, actual=a, message_index=c.assistant_index)
        for n, a, c in extra
    ]
    return missing_diffs, extra_diffs, differing


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


def _unmatched(expected: list[Any], actual: list[Any]) -> tuple[list[Any], list[Any]]:
    """The expected and the actual writes (name, normalised arguments, …) left unmatched
    after pairing equal ones (as multisets)."""
    key = lambda item: (item[0], canonical_hash(item[1]))  # noqa: E731
    unmatched_actual = Counter(key(a) for a in actual)
    left_expected = []
    for e in expected:
        if unmatched_actual[key(e)] > 0:
            unmatched_actual[key(e)] -= 1
        else:
            left_expected.append(e)
    left_actual = []
    for a in actual:
        if unmatched_actual[key(a)] > 0:
            unmatched_actual[key(a)] -= 1
            left_actual.append(a)
    return left_expected, left_actual


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
    left_expected, left_actual = _unmatched(expected, actual)
    missing, extra, differing = _pair_leftovers(left_expected, left_actual, run.schemas)
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
