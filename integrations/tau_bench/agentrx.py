"""A failure category in the AgentRx taxonomy, predicted from the structured facts forensics
already has (never from the annotations).

AgentRx annotators label a failed run's root cause with one category of their taxonomy (the
labels of ``agentrx-retail-annotations.json``) and a step (the 1-based message index). The
rules below were written from the categories' definitions, before any per-run label was
looked at, and map a comparison's signature to the category that describes that kind of
mistake:

| signature | category | why |
| --- | --- | --- |
| ``EPISODE_UNFINISHED`` | System Failure | the run was cut by the harness (step limit) |
| ``WRITE_MISSING_AFTER_ERROR`` | Invalid Invocation | the write was attempted and the tool refused it |
| ``WORLD_STATE_DIFFERS`` | Invalid Invocation | the writes look right, the tool did something else |
| ``WRITE_WRONG_ARGUMENTS`` / ``WRITE_WRONG_TARGET`` | Misinterpretation of Tool Output when a wrong value was read from an earlier tool answer, else Underspecified User Intent | the agent took a wrong value from what a tool said, or acted on what the user left open |
| ``WRITE_UNEXPECTED`` | Intent Plan Misalignment | the agent did something the user did not ask for |
| ``WRITE_MISSING`` | Intent Not Supported after a hand-over to a human, else Intent Plan Misalignment | the agent never did what was asked |
| ``OUTPUT_MISSING`` | Misinterpretation of Tool Output | the facts were in the tool answers; the user was told otherwise |

The step is the message ``forensics`` localises (the first divergent message), as AgentRx's
1-based ``step_number``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["CATEGORIES", "predict_category"]

SYSTEM_FAILURE = "System Failure"
INVALID_INVOCATION = "Invalid Invocation"
MISREAD_TOOL_OUTPUT = "Misinterpretation of Tool Output"
UNDERSPECIFIED_INTENT = "Underspecified User Intent"
PLAN_MISALIGNMENT = "Intent Plan Misalignment"
INTENT_NOT_SUPPORTED = "Intent Not Supported"
INSTRUCTION_ADHERENCE = "Instruction Adherence Failure"

CATEGORIES = (
    SYSTEM_FAILURE,
    INVALID_INVOCATION,
    MISREAD_TOOL_OUTPUT,
    UNDERSPECIFIED_INTENT,
    PLAN_MISALIGNMENT,
    INTENT_NOT_SUPPORTED,
    INSTRUCTION_ADHERENCE,
)

_BY_SIGNATURE = {
    "EPISODE_UNFINISHED": SYSTEM_FAILURE,
    "WRITE_MISSING_AFTER_ERROR": INVALID_INVOCATION,
    "WORLD_STATE_DIFFERS": INVALID_INVOCATION,
    "WRITE_UNEXPECTED": PLAN_MISALIGNMENT,
    "OUTPUT_MISSING": MISREAD_TOOL_OUTPUT,
}
HAND_OVER = "transfer_to_human_agents"


def _leaves(value: Any) -> Iterable[str]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif value is not None and not isinstance(value, bool):
        yield str(value)


def _wrong_values(expected: Any, actual: Any, names: Iterable[str]) -> set[str]:
    """The values of the differing arguments the agent used that the expected write lacks."""
    if not isinstance(expected, dict) or not isinstance(actual, dict):
        return set(_leaves(actual)) - set(_leaves(expected))
    wrong: set[str] = set()
    for name in names:
        wrong |= set(_leaves(actual.get(name))) - set(_leaves(expected.get(name)))
    return wrong


def predict_category(
    signature: str | None,
    differing: Iterable[Any],
    tool_answers: Iterable[tuple[int, str]],
    called: Iterable[str],
) -> str | None:
    """The category of a failed run (None when no signature: predicted pass).

    ``differing``: the comparison's differing writes (``WriteDiff``); ``tool_answers``:
    (message index, text) of every tool answer; ``called``: the tools the run called."""
    if signature is None:
        return None
    if signature in _BY_SIGNATURE:
        return _BY_SIGNATURE[signature]
    if signature == "WRITE_MISSING":
        return INTENT_NOT_SUPPORTED if HAND_OVER in set(called) else PLAN_MISALIGNMENT
    answers = list(tool_answers)
    for diff in differing:
        if diff.arguments == ("<target>",):  # another entity: every value it names
            values = set(_leaves(diff.actual)) - set(_leaves(diff.expected))
        else:
            values = _wrong_values(diff.expected, diff.actual, diff.arguments)
        wrong = {v for v in values if len(v) > 2}
        before = [text for index, text in answers if index < (diff.message_index or 0)]
        if any(value in text for value in wrong for text in before):
            return MISREAD_TOOL_OUTPUT
    return UNDERSPECIFIED_INTENT
