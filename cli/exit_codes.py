"""The exit codes of ``replaybook``: public, stable, the same for every command.

=====  ==========================================================================================
code   meaning
=====  ==========================================================================================
0      success: the command did what was asked and the result it reports is sound
1      a failed or broken result: a chain or evidence that does not verify, a replay that ended
       FAILED or CANCELED, a regression case that does not hold, an objective not met, a
       component that is down
2      bad input: an unknown id, option or candidate, a value that breaks a rule, a request the
       current state refuses, an incident or replay id already used (the message on stderr
       names the field and the rule); checked before any workflow starts
3      reconciliation required: a side effect whose outcome is UNKNOWN
4      a store or service is unavailable or failed (database, artifact store, Temporal)
5      an internal error (a bug): one line on stderr, the traceback in
       ``$REPLAYBOOK_HOME/logs/cli-errors.log``
6      inconclusive: a gate that neither shows the case holds nor that it breaks (``case run``)
=====  ==========================================================================================

``COMMAND_EXIT_CODES`` says which of them each command can end with beyond 0, 2, 4 and 5
(which every command can); docs/reference/cli.md shows the same table and a test keeps the two equal.
"""

from __future__ import annotations

from models.errors import (
    ActionRefusedError,
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    ReconciliationRequiredError,
    ReplaybookError,
    SideEffectError,
)

EXIT_OK = 0
EXIT_BROKEN = 1
EXIT_BAD_INPUT = 2
EXIT_RECONCILE = 3
EXIT_STORE = 4
EXIT_INTERNAL = 5
EXIT_INCONCLUSIVE = 6

#: command -> what ends it with 1 or 3 (every command can also end with 0, 2, 4 and 5)
COMMAND_EXIT_CODES: dict[str, dict[int, str]] = {
    "canonical": {},
    "runs list": {},
    "runs show": {},
    "runs verify": {1: "the chain or evidence does not verify"},
    "anchors write": {1: "a run does not verify (nothing is anchored)"},
    "anchors verify": {1: "an anchor, anchored run or the audit chain does not verify"},
    "anchors public-key": {},
    "demo": {1: "a step of the demo did not give the expected result"},
    "agent run": {},
    "side-effects retry": {
        1: "the run does not verify",
        3: "the side effect is UNKNOWN: reconcile it first",
    },
    "side-effects sweep": {},
    "examples providers": {},
    "models list": {},
    "import tau-bench": {},
    "import tau2-bench": {},
    "import otel": {},
    "import openinference": {},
    "replay start": {1: "with --wait: the replay ended FAILED or CANCELED"},
    "replay status": {1: "the replay ended FAILED or CANCELED"},
    "replay cancel": {},
    "worker": {},
    "incident open": {},
    "incident status": {1: "the incident FAILED"},
    "incident resolve-side-effect": {},
    "incident confirm": {},
    "incident report": {},
    "signatures": {},
    "report": {},
    "regress": {
        1: "a regression case does not hold with the candidate (its reproduction rate is shown "
        "above the threshold)",
        6: "inconclusive: a case is not shown to hold (the 95% upper bound of its reproduction "
        "rate is above the threshold), and no regression is shown",
    },
    "regress retire": {},
    "evidence show": {},
    "audit": {},
    "privacy sweep": {},
    "privacy hold": {},
    "privacy release": {},
    "privacy delete-subject": {},
    "forensics expected": {},
    "forensics evaluate": {},
    "forensics world": {},
    "sandbox check": {1: "a probe found the sandbox weaker than required"},
    "slo": {1: "an objective is not met"},
    "case export": {},
    "case verify": {1: "the capsule fails a check (the check is named)"},
    "case run": {
        1: "the case does not hold with the candidate, or the capsule fails a check (named)",
        6: "inconclusive: no replay broke the case, and not every replay showed it holds",
    },
    "case import": {1: "the capsule fails a check, or its run does not verify in the store"},
    "case list": {},
    "case public-key": {},
    "dev up": {},
    "dev status": {1: "a component of the stack is down"},
    "dev down": {},
    "api": {},
}


def exit_code_for(exc: ReplaybookError) -> int:
    """The exit code a Replaybook error ends the command with."""
    if isinstance(exc, ReconciliationRequiredError):
        return EXIT_RECONCILE
    if isinstance(
        exc,
        InvalidInputError | NotFoundError | ConflictError | SideEffectError | ActionRefusedError,
    ):
        return EXIT_BAD_INPUT
    if isinstance(exc, IntegrityError):
        return EXIT_BROKEN
    return EXIT_STORE
