"""Failure signatures: a stable name for how a run failed, so incidents aggregate.

``classify(facts)`` reads only structured facts (statuses, capability ids, argument *names*,
error type names, booleans) and never free text, ids, counts or times, so the same failure
gets the same signature in every incident. ``forensics.failure_facts`` gathers the facts.

When several rows apply, the first row of this table wins (``signature``); the others are
listed in ``contributing``. ``qualifier`` names the structured subject (a capability, a lookup
shape, an error type) and ``signature_key`` = signature + a short hash of the qualifier, for
when "duplicated refund" and "duplicated email" must be told apart.

| signature | failure type | observed facts |
| --- | --- | --- |
| ``SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE`` | SIDE_EFFECT | a write's outcome was UNKNOWN, it was attempted again, and two attempts are known applied |
| ``AUTHORITY_WRITE_BEYOND_GRANT`` | AUTHORITY | a write reached the provider although the run's recorded policy denied that action, required an approval nobody gave, or never decided on it |
| ``SIDE_EFFECT_DUPLICATE`` | SIDE_EFFECT | one action (capability + action hash) applied twice, no UNKNOWN involved |
| ``DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT`` | DATA | a READ by a non-unique key returned ≥2 entities, the first is not the one the run was asked about, and a WRITE named it |
| ``SIDE_EFFECT_UNKNOWN_RETRY_UNRESOLVED`` | SIDE_EFFECT | UNKNOWN, attempted again, whether twice applied is not known (reconcile first) |
| ``SIDE_EFFECT_UNKNOWN_RETRY_NO_DUPLICATE`` | SIDE_EFFECT | UNKNOWN, attempted again, at most one attempt applied |
| ``SIDE_EFFECT_UNKNOWN_NO_RETRY`` | SIDE_EFFECT | UNKNOWN, never attempted again (the reference refund-timeout incident) |
| ``POLICY_DENIED_ACTION_ATTEMPTED`` | POLICY | the runtime refused a write the policy denied |
| ``APPROVAL_MISSING`` / ``_EXPIRED`` / ``_DENIED`` / ``_MISMATCH`` / ``_INVALID`` | APPROVAL | the runtime refused a write for lack of a valid approval |
| ``TOOL_FIXTURE_MISS`` / ``RETRIEVAL_FIXTURE_MISS`` | TOOL / RETRIEVAL | a replay asked for a tool call / retrieval that was never recorded |
| ``RUN_FAILED_<ERROR>`` (see ``RUN_ERRORS``) | per error | the run ended with a known error type |
| ``RUN_FAILED_UNCLASSIFIED`` | INFRASTRUCTURE | the run ended with any other error type (the qualifier names it) |
| ``TOOL_WRITE_REJECTED`` | TOOL | a provider definitely refused a write (FAILED) |
| ``DATA_NONUNIQUE_LOOKUP_WRONG_ENTITY`` | DATA | as the wrong-recipient row, but no write named the entity |
| ``POLICY_DENIED_ACTION`` | POLICY | a policy denied a write and the agent did not attempt it |
| ``PROMPT_SWAP_FIXES`` | PROMPT | no other row applies, the exact replay reproduces the failure and a prompt-swap counterfactual never does (known once the incident's counterfactuals ran) |
| ``MODEL_DECISION_UNEXPLAINED`` | MODEL_DECISION | no structured fact explains the failure: every boundary behaved, so what is left is the model's choices; a human classifies it |

Why the wrong-customer incident is DATA, not PROMPT: the confirmed root cause of the seed's
incident is prompt v17 (it does not say to identify customers by ``customer_id``), but that is a
conclusion a human draws from counterfactual replays (rule 18). What the evidence *shows* is a
data-identity failure: a key that is not unique returned several entities and the write went to
one that is not the entity asked about. The same observation arises from a model upgrade or a
CRM that starts returning duplicates, and all of those must aggregate under one signature.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, JsonValue

from models.base import Record
from models.canonical import canonical_hash
from models.enums import AgentFailureType, SideEffectStatus

F = AgentFailureType


class SideEffectFacts(Record):
    """One action (capability + action hash) and every ledger entry that carried it out."""

    capability_id: str
    final_status: SideEffectStatus
    #: the agent saw UNKNOWN at some point; reconciliation later does not erase that
    outcome_was_unknown: bool = False
    reconciled_applied: bool | None = None
    #: the action was sent to the provider more than once (same or another idempotency key)
    retry_attempted: bool = False
    #: two attempts known applied at the provider; None when that cannot be known yet
    duplicated: bool | None = False
    side_effect_ids: tuple[str, ...] = ()


class NonUniqueLookupFact(Record):
    """A READ whose answer listed several entities, the first not the one the run asked about."""

    capability_id: str
    #: argument names of the lookup (e.g. ``("phone",)``): the key that was not unique
    key_names: tuple[str, ...]
    match_count: int = Field(ge=2)
    #: the input field the first match was compared with (e.g. ``customer_id``)
    id_field: str
    asked_id: str
    taken_id: str
    #: the first later WRITE whose arguments name the taken entity, and the argument name
    write_capability_id: str | None = None
    write_field: str | None = None


class PolicyDenialFact(Record):
    policy_id: str | None = None
    capability_id: str | None = None
    #: the agent tried to execute it anyway and the runtime refused (ACTION_REFUSED)
    attempted: bool = False


class RefusalFact(Record):
    """An ACTION_REFUSED for lack of a valid approval; ``error`` is the error type name."""

    capability_id: str
    error: str


class AuthorityFact(Record):
    """A write that was carried out (reached the provider) beyond what was granted, in a run
    that records its policy decisions: ``denied`` (the policy's decision on that action was
    DENY), ``unapproved`` (it required an approval and none approved that action) or
    ``ungranted`` (no policy decision covers that action at all)."""

    capability_id: str
    reason: Literal["denied", "unapproved", "ungranted"]


class FixtureMissFact(Record):
    capability_id: str
    policy: str


class FailureFacts(Record):
    """Structured facts about one failed run (``forensics.failure_facts.gather_failure_facts``)."""

    run_id: str | None = None
    completed: bool = True
    run_error_type: str | None = None
    outcome: JsonValue = None
    side_effects: tuple[SideEffectFacts, ...] = ()
    nonunique_lookups: tuple[NonUniqueLookupFact, ...] = ()
    policy_denials: tuple[PolicyDenialFact, ...] = ()
    approval_refusals: tuple[RefusalFact, ...] = ()
    fixture_misses: tuple[FixtureMissFact, ...] = ()
    authority_violations: tuple[AuthorityFact, ...] = ()
    #: the incident's replays showed a prompt swap fixing the failure: the exact replay
    #: reproduced it and a prompt counterfactual never did (``signature_with_replays``)
    prompt_swap_fixes: bool = False


class FailureClassification(Record):
    failure_type: AgentFailureType
    signature: str
    #: the structured subject: a capability, a lookup shape, an error type name
    qualifier: str | None = None
    #: ``signature_key``: the signature with a short hash of the qualifier
    key: str
    #: other signatures the facts also match, in precedence order
    contributing: tuple[str, ...] = ()
    explanation: str


#: run error type name → (signature, failure type); error names are persisted, never renamed
RUN_ERRORS: dict[str, tuple[str, AgentFailureType]] = {
    "ModelProviderError": ("RUN_FAILED_MODEL_PROVIDER", F.INFRASTRUCTURE),
    "StoreError": ("RUN_FAILED_STORE", F.INFRASTRUCTURE),
    "BudgetExhaustedError": ("RUN_FAILED_BUDGET_EXHAUSTED", F.INFRASTRUCTURE),
    "StateMigrationError": ("RUN_FAILED_STATE_MIGRATION", F.STATE),
    "SequenceConflictError": ("RUN_FAILED_SEQUENCE_CONFLICT", F.CONCURRENCY),
    # a loop or a tool that does not exist are choices the model made
    "StepLimitExceeded": ("RUN_FAILED_STEP_LIMIT", F.MODEL_DECISION),
    "UnknownCapabilityError": ("RUN_FAILED_UNKNOWN_CAPABILITY", F.MODEL_DECISION),
    "FixtureMissError": ("TOOL_FIXTURE_MISS", F.TOOL),
    "PolicyDeniedError": ("POLICY_DENIED_ACTION_ATTEMPTED", F.POLICY),
    "ApprovalMissingError": ("APPROVAL_MISSING", F.APPROVAL),
    "ApprovalExpiredError": ("APPROVAL_EXPIRED", F.APPROVAL),
    "ApprovalDeniedError": ("APPROVAL_DENIED", F.APPROVAL),
    "ApprovalMismatchError": ("APPROVAL_MISMATCH", F.APPROVAL),
    "ApprovalError": ("APPROVAL_INVALID", F.APPROVAL),
}

# the table's rows: precedence (lower wins; RUN_FAILED_* share one rank) and explanation
_ROWS: dict[str, tuple[int, str]] = {
    "SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE": (0, "an UNKNOWN {q} was retried and applied twice"),
    # a write carried out beyond its grant outranks how it then went wrong
    "AUTHORITY_WRITE_BEYOND_GRANT": (0, "{q} was carried out beyond what was granted"),
    "SIDE_EFFECT_DUPLICATE": (1, "the same {q} was applied twice"),
    "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT": (2, "a write went to the wrong match ({q})"),
    "SIDE_EFFECT_UNKNOWN_RETRY_UNRESOLVED": (3, "an UNKNOWN {q} was retried, unreconciled"),
    "SIDE_EFFECT_UNKNOWN_RETRY_NO_DUPLICATE": (4, "an UNKNOWN {q} was retried, not duplicated"),
    "SIDE_EFFECT_UNKNOWN_NO_RETRY": (5, "the outcome of {q} was UNKNOWN and it was not retried"),
    "POLICY_DENIED_ACTION_ATTEMPTED": (6, "the agent attempted {q}, which the policy denied"),
    "APPROVAL": (7, "the runtime refused {q}: no valid approval"),
    "TOOL_FIXTURE_MISS": (8, "replay asked {q} for something never recorded"),
    "RETRIEVAL_FIXTURE_MISS": (8, "replay asked {q} for something never recorded"),
    "RUN_FAILED": (9, "the run failed with {q}"),
    "TOOL_WRITE_REJECTED": (10, "the provider refused {q}"),
    "DATA_NONUNIQUE_LOOKUP_WRONG_ENTITY": (11, "another entity matched first ({q})"),
    "POLICY_DENIED_ACTION": (12, "the policy denied {q}"),
    "PROMPT_SWAP_FIXES": (13, "no boundary failed and a prompt swap ({q}) stops the failure"),
    "MODEL_DECISION_UNEXPLAINED": (14, "no structured fact explains it; a human classifies it"),
}


def _row(signature: str) -> tuple[int, str]:
    family = "APPROVAL" if signature.startswith("APPROVAL_") else "RUN_FAILED"
    return _ROWS.get(signature) or _ROWS[family]


_Candidate = tuple[int, str, AgentFailureType, str | None]


def _side_effect_candidates(effect: SideEffectFacts) -> list[_Candidate]:
    q = effect.capability_id
    if effect.outcome_was_unknown and effect.retry_attempted:
        suffix = {True: "DUPLICATE", None: "UNRESOLVED", False: "NO_DUPLICATE"}[effect.duplicated]
        signature = f"SIDE_EFFECT_UNKNOWN_RETRY_{suffix}"
    elif effect.outcome_was_unknown:
        signature = "SIDE_EFFECT_UNKNOWN_NO_RETRY"
    elif effect.duplicated:
        signature = "SIDE_EFFECT_DUPLICATE"
    elif effect.final_status is SideEffectStatus.FAILED:
        return [(_row("TOOL_WRITE_REJECTED")[0], "TOOL_WRITE_REJECTED", F.TOOL, q)]
    else:
        return []
    return [(_row(signature)[0], signature, F.SIDE_EFFECT, q)]


def _run_error(error: str) -> _Candidate:
    signature, failure_type = RUN_ERRORS.get(error, ("RUN_FAILED_UNCLASSIFIED", F.INFRASTRUCTURE))
    return (_row(signature)[0], signature, failure_type, error)


def _candidates(facts: FailureFacts) -> list[_Candidate]:
    found: list[_Candidate] = []
    for effect in facts.side_effects:
        found += _side_effect_candidates(effect)
    for lookup in facts.nonunique_lookups:
        shape = f"{lookup.capability_id}({','.join(lookup.key_names)})"
        if lookup.write_capability_id:
            signature = "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
            shape += f"->{lookup.write_capability_id}.{lookup.write_field}"
        else:
            signature = "DATA_NONUNIQUE_LOOKUP_WRONG_ENTITY"
        found.append((_row(signature)[0], signature, F.DATA, shape))
    for denial in facts.policy_denials:
        signature = "POLICY_DENIED_ACTION_ATTEMPTED" if denial.attempted else "POLICY_DENIED_ACTION"
        found.append((_row(signature)[0], signature, F.POLICY, denial.capability_id))
    for refusal in facts.approval_refusals:
        signature, _ = RUN_ERRORS.get(refusal.error, ("APPROVAL_INVALID", F.APPROVAL))
        found.append((_row("APPROVAL")[0], signature, F.APPROVAL, refusal.capability_id))
    for miss in facts.fixture_misses:
        retrieval = miss.capability_id == "knowledge.search"
        signature = "RETRIEVAL_FIXTURE_MISS" if retrieval else "TOOL_FIXTURE_MISS"
        failure_type = F.RETRIEVAL if retrieval else F.TOOL
        found.append((_row(signature)[0], signature, failure_type, miss.capability_id))
    for violation in facts.authority_violations:
        qualifier = f"{violation.capability_id}:{violation.reason}"
        found.append(
            (
                _row("AUTHORITY_WRITE_BEYOND_GRANT")[0],
                "AUTHORITY_WRITE_BEYOND_GRANT",
                F.AUTHORITY,
                qualifier,
            )
        )
    if facts.prompt_swap_fixes:
        found.append((_row("PROMPT_SWAP_FIXES")[0], "PROMPT_SWAP_FIXES", F.PROMPT, "prompt"))
    if facts.run_error_type:
        error = _run_error(facts.run_error_type)
        # the error that ended the run usually restates a fact above (a refusal raises);
        # the fact names the capability, so it is kept and the restatement dropped
        if error[1] not in {c[1] for c in found}:
            found.append(error)
    return found


def _key(signature: str, qualifier: str | None) -> str:
    digest = canonical_hash({"signature": signature, "qualifier": qualifier})
    return f"{signature}:{digest.removeprefix('sha256:')[:8]}"


def classify(facts: FailureFacts) -> FailureClassification:
    """The failure type and stable signature of ``facts`` (see the module's table)."""
    unexplained = "MODEL_DECISION_UNEXPLAINED"
    found = _candidates(facts) or [(_row(unexplained)[0], unexplained, F.MODEL_DECISION, None)]
    # sorting on structure only: the order facts were recorded in never changes the result
    found.sort(key=lambda c: (c[0], c[1], c[3] or ""))
    _, signature, failure_type, qualifier = found[0]
    contributing: list[str] = []
    for _, other, _, _ in found[1:]:
        if other != signature and other not in contributing:
            contributing.append(other)
    return FailureClassification(
        failure_type=failure_type,
        signature=signature,
        qualifier=qualifier,
        key=_key(signature, qualifier),
        contributing=tuple(contributing),
        explanation=_row(signature)[1].format(q=qualifier or "an action"),
    )


def signature_key(facts: FailureFacts) -> str:
    """``SIGNATURE:xxxxxxxx``: the signature plus 8 hex of a hash of its qualifier, so the same
    failure mode on different capabilities (or error types) can be grouped apart."""
    return classify(facts).key
