"""Framework terminators: the pseudo-tools agent frameworks call to end a run.

Frameworks end a run in different ways: a pseudo-tool that hands back the answer
(smolagents' ``final_answer``, the OpenAI Agents SDK's ``final_output``, pydantic-ai's
``final_result``), a ``terminate``/``finish``/``task_complete``-style tool, or simply a last
model message after a tool. Some frameworks call the terminator and then let the model speak
once more. A terminator is recognised by the shape of its name (the family), never by a list of
the names seen so far, and it is never a side effect.

Whether a terminator *ends* the tool loop is read from the recorded run, not assumed: it does
only when the run's last step is that call; when a model message follows it, the loop goes on
to the model, so a recorded replay keeps every step the source took.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["ending_terminators", "is_terminator"]

_TERMINATOR = re.compile(
    r"""^(?:
        final[ _.-]?(?:answer|output|result|response|message)s?
      | (?:return|submit|give|provide)[ _.-]?(?:the[ _.-]?)?final[ _.-]?(?:answer|output|result)
      | (?:task[ _.-]?)?(?:terminate|termination|finish|finished|complete|completed|done)
            (?:[ _.-]?(?:task|tool|run|conversation|chat|agent))?
      | attempt[ _.-]?completion
      | end[ _.-]?(?:conversation|chat|run|task|session)
    )$""",
    re.IGNORECASE | re.VERBOSE,
)


def is_terminator(name: str) -> bool:
    """Whether a tool name is one of the family of framework terminators."""
    return bool(_TERMINATOR.match(name.strip()))


def ending_terminators(steps: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The terminators that end the tool loop, given the run's steps in order as
    ``("model", "")`` and ``("tool", name)``: the last step's tool when it is a terminator
    never called before without ending the run, else none (the loop then ends on the model's
    answer, or on the recorded number of model calls)."""
    if not steps or steps[-1][0] != "tool" or not is_terminator(steps[-1][1]):
        return ()
    name = steps[-1][1]
    # an earlier call of the same terminator that the run went on after: it does not end it
    if any(kind == "tool" and n == name for kind, n in steps[:-1]):
        return ()
    return (name,)
