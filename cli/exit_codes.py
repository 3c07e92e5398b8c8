"""The exit codes of ``replaybook``: public, stable, documented in README.md.

0 success; 1 verification found broken or corrupted evidence (or an objective failed);
2 bad input, including an unknown id; 3 reconciliation required; 4 a store or service failed.
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
