"""The one error tree of Replaybook.

Every error raised on purpose by Replaybook code is one of these. The class names are
persisted (Temporal records error type names in history and lists them as non-retryable),
so they are never renamed. Each class carries a stable ``code`` for the CLI and the API.

    ReplaybookError
    ├── InvalidInputError              bad input from a user or caller (CLI exit 2, HTTP 4xx)
    │   ├── CanonicalizationError      JSON that has no canonical form (duplicate key, NaN, …)
    │   └── ConfigurationError         a setting that cannot be used
    ├── NotFoundError                  something named does not exist
    │   ├── RunNotFoundError
    │   ├── ArtifactNotFoundError
    │   ├── UnknownCapabilityError     a tool that is not in the capability registry
    │   ├── ContentDestroyedError      raw content destroyed by a deletion request (crypto-shredded)
    │   └── GraphNotFoundError         a graph id/version that was never registered
    ├── ConflictError                  a write that contradicts what is recorded
    │   ├── SequenceConflictError      an append that is not the next link of the chain
    │   └── EvidenceLockedError        deletion refused: legal hold, retention or freeze
    ├── IntegrityError                 stored evidence does not match its recorded hash
    │   ├── ArtifactIntegrityError     artifact bytes do not hash to their key
    │   ├── ChainBrokenError           an event chain failed verification
    │   └── CapsuleRefusedError        an incident capsule failed a check (``check`` names it)
    ├── SideEffectError
    │   ├── ReconciliationRequiredError   retry of an UNKNOWN side effect (rule 5)
    │   ├── SideEffectOutcomeUnknownError a provider call whose outcome cannot be known
    │   ├── ProviderRejectedError      a provider definitely refused (nothing was applied)
    │   └── RetryNotAllowedError       retry of an effect that is applied or still in flight
    ├── ActionRefusedError             the runtime refused to execute an action
    │   ├── PolicyDeniedError          the policy said DENY
    │   ├── AccessDeniedError          raw evidence read without the forensic role, a reason or the key
    │   └── ApprovalError              no valid approval bound to this action
    │       ├── ApprovalMissingError
    │       ├── ApprovalExpiredError
    │       ├── ApprovalDeniedError
    │       └── ApprovalMismatchError  approval granted for a different action hash
    ├── StateMigrationError            no migration path between state schema versions
    ├── FixtureMissError               replay met a request with no recorded fixture (policy FAIL)
    ├── BudgetExhaustedError           a replay's budget ran out (the replay ends partial)
    ├── StoreError                     a backend failed (connection, permissions, …)
    ├── ModelProviderError             a model endpoint failed or answered nonsense
    └── SandboxError                   replay-step isolation (rule 16)
        ├── SandboxUnavailableError    the sandbox cannot be created: steps are refused
        ├── SandboxViolationError      a sandboxed step asked for what a replay may not do
        ├── SandboxQuotaError          a replay's sandboxed steps wrote, called or sent too much
        ├── SandboxedStepFailedError   the sandboxed step process died (a limit, a crash)
        └── SandboxStartTimeoutError   a sandboxed process did not become ready in time

Every error declares, besides its message:

* ``field`` (``str | None``): the input it is about, when it is about one (``"reason"``,
  ``"--mode"``, ``"Authorization"``); the API answers it as ``field``;
* ``retryable`` (``bool``): ``False`` when trying again cannot help (a sandbox limit, a
  provider's 4xx), ``True`` when it leaves the decision to Temporal's retry policy, which
  matches class names.

Both are keyword arguments of every constructor, e.g. ``InvalidInputError(message,
field="reason")``. Nothing sets attributes on an error after it is made:
``error.with_field(name)`` is a copy of an error already raised that names ``name``, and
``Class.restored(message, attributes)`` rebuilds one raised in another process.

A replay that differs from its source is a result (``TrajectoryDiff``), never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Self


class ReplaybookError(Exception):
    """Root of every error Replaybook raises on purpose."""

    code: ClassVar[str] = "replaybook_error"
    #: the input this error is about (a CLI option, an API field, parameter or header)
    field: str | None = None
    #: ``False``: retrying cannot help; ``True``: Temporal's retry policy decides by class name
    retryable: bool = True

    def __init__(self, *args: object, field: str | None = None, retryable: bool = True) -> None:
        super().__init__(*args)
        self.field = field
        self.retryable = retryable

    def with_field(self, field: str) -> Self:
        """This error (class, message and every attribute) naming ``field`` instead, to raise
        in its place: ``raise exc.with_field("run_id") from exc``."""
        return type(self)._rebuilt(self.args, {**vars(self), "field": field})

    @classmethod
    def restored(cls, message: str, attributes: Mapping[str, object]) -> Self:
        """The error another process raised, from its message and attributes (``vars``)."""
        return cls._rebuilt((message,), attributes)

    @classmethod
    def _rebuilt(cls, args: tuple[object, ...], attributes: Mapping[str, object]) -> Self:
        # the constructor is not called again: subclasses with their own arguments (a path, a
        # sequence, a status) would word the message twice
        error = cls.__new__(cls, *args)
        Exception.__init__(error, *args)
        vars(error).update(attributes)
        return error


class InvalidInputError(ReplaybookError):
    """Input that cannot be accepted; the message names the problem."""

    code = "invalid_input"


class CanonicalizationError(InvalidInputError):
    """A value that has no RFC 8785 canonical form under Replaybook's rules."""

    code = "not_canonicalizable"

    def __init__(
        self, message: str, path: str = "$", *, field: str | None = None, retryable: bool = True
    ) -> None:
        super().__init__(f"{message} at {path}", field=field, retryable=retryable)
        self.reason = message
        self.path = path


class ConfigurationError(InvalidInputError):
    code = "bad_configuration"


class NotFoundError(ReplaybookError):
    code = "not_found"


class RunNotFoundError(NotFoundError):
    code = "run_not_found"


class ArtifactNotFoundError(NotFoundError):
    code = "artifact_not_found"


class ContentDestroyedError(NotFoundError):
    """Raw content that a deletion request destroyed (its data key is gone); the message names
    the request and the time."""

    code = "content_destroyed"


class ConflictError(ReplaybookError):
    code = "conflict"


class SequenceConflictError(ConflictError):
    """An append that does not extend the chain head (taken sequence, wrong previous hash)."""

    code = "sequence_conflict"


class EvidenceLockedError(ConflictError):
    """Deleting evidence that is under legal hold, retention or an incident freeze."""

    code = "evidence_locked"


class IntegrityError(ReplaybookError):
    code = "integrity"


class ArtifactIntegrityError(IntegrityError):
    """Stored bytes whose SHA-256 is not the digest they are stored under."""

    code = "artifact_corrupted"


class ChainBrokenError(IntegrityError):
    code = "chain_broken"

    def __init__(
        self,
        message: str,
        sequence: int | None = None,
        *,
        field: str | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(message, field=field, retryable=retryable)
        self.sequence = sequence


class CapsuleRefusedError(IntegrityError):
    """An incident capsule (``.rbcase``) that failed a check; ``check`` names it (format,
    signature, manifest, entries, chain)."""

    code = "capsule_refused"

    def __init__(
        self, check: str, message: str, *, field: str | None = None, retryable: bool = False
    ) -> None:
        super().__init__(f"check {check!r} failed: {message}", field=field, retryable=retryable)
        self.check = check


class SideEffectError(ReplaybookError):
    code = "side_effect"


class ReconciliationRequiredError(SideEffectError):
    """A retry of a side effect whose outcome is UNKNOWN: reconcile first (rule 5)."""

    code = "reconciliation_required"


class StoreError(ReplaybookError):
    """A storage backend failed; the original driver error is chained as ``__cause__``."""

    code = "store_error"


class ModelProviderError(ReplaybookError):
    """A model provider failed (HTTP error, timeout, malformed answer); ``retryable`` tells
    Temporal's retry policy whether trying again can help (429, 5xx, timeouts)."""

    code = "model_provider_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        field: str | None = None,
    ) -> None:
        super().__init__(message, field=field, retryable=retryable)
        self.status = status


class UnknownCapabilityError(NotFoundError):
    code = "unknown_capability"


class GraphNotFoundError(NotFoundError):
    code = "graph_not_found"


class SideEffectOutcomeUnknownError(SideEffectError):
    """Raised by a provider adapter when a write was sent but its outcome is unknowable
    (timeout after send, lost response). The side effect is recorded UNKNOWN."""

    code = "side_effect_outcome_unknown"


class ProviderRejectedError(SideEffectError):
    """The provider definitely refused the write: nothing was applied (recorded FAILED)."""

    code = "provider_rejected"


class RetryNotAllowedError(SideEffectError):
    """Only a side effect proved not applied (FAILED, or RECONCILED not applied) is retried."""

    code = "retry_not_allowed"


class ActionRefusedError(ReplaybookError):
    code = "action_refused"


class PolicyDeniedError(ActionRefusedError):
    code = "policy_denied"


class AccessDeniedError(ActionRefusedError):
    """Reading raw evidence without the forensic role, without a reason, or without the key."""

    code = "access_denied"


class ApprovalError(ActionRefusedError):
    code = "approval_invalid"


class ApprovalMissingError(ApprovalError):
    code = "approval_missing"


class ApprovalExpiredError(ApprovalError):
    code = "approval_expired"


class ApprovalDeniedError(ApprovalError):
    code = "approval_denied"


class ApprovalMismatchError(ApprovalError):
    code = "approval_mismatch"


class StateMigrationError(ReplaybookError):
    code = "state_migration"


class FixtureMissError(ReplaybookError):
    """A replay request with no recorded answer, under the FAIL miss policy (rule 3)."""

    code = "fixture_miss"
    #: what the request was for: a tool's capability id, ``knowledge.search`` or ``model``
    capability_id: str | None = None

    def __init__(
        self,
        *args: object,
        capability_id: str | None = None,
        field: str | None = None,
        retryable: bool = True,
    ) -> None:
        super().__init__(*args, field=field, retryable=retryable)
        self.capability_id = capability_id


class BudgetExhaustedError(ReplaybookError):
    """A replay's budget ran out; the replay stops cleanly with a partial result (rule 15)."""

    code = "budget_exhausted"


class SandboxError(ReplaybookError):
    code = "sandbox_error"


class SandboxUnavailableError(SandboxError):
    """bubblewrap cannot create the sandbox; a replay worker then refuses to run steps rather
    than run them unsandboxed (unless started with the explicit development flag)."""

    code = "sandbox_unavailable"


class SandboxViolationError(SandboxError):
    """A sandboxed step asked its broker for something a replay step may not do (a write to
    another run, an unknown call) or broke the pipe protocol."""

    code = "sandbox_violation"


class SandboxQuotaError(SandboxError):
    """A replay's sandboxed steps went past a quota of the worker's broker (bytes written per
    replay, calls per batch, size of one message): the replay stops with a partial result."""

    code = "sandbox_quota"


class SandboxedStepFailedError(SandboxError):
    """The sandboxed step process ended without an answer: killed by a limit (CPU, memory,
    file size, processes), by the wall-clock timeout, or crashed. The message names why."""

    code = "sandboxed_step_failed"


class SandboxStartTimeoutError(SandboxError):
    """A sandboxed step process that did not report ready within the start timeout
    (``REPLAYBOOK_SANDBOX_START_SECONDS``): it was killed and the activity fails with this
    error instead of waiting for ever. Retryable: a new attempt starts a new process."""

    code = "sandbox_start_timeout"
