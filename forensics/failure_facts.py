"""The structured facts of a recorded run that ``models.signatures.classify`` signs.

Read-only: the run's events through the ``EventLedger`` port and its ``SideEffectRecord`` and
``PolicyDecisionRecord`` records through the ``EvidenceReader`` port. What is read:

- side effects, grouped per action (capability + action hash): a second entry for the same
  action, or a second EXECUTING of one entry, is a retry; the first entry's last status is the
  final status; two entries known applied (CONFIRMED, or RECONCILED applied) are a duplicate,
  and while an UNKNOWN entry could make it two, duplication is not known (None);
- non-unique lookups: a READ tool call that succeeded and whose response lists ≥2 entities
  (the response itself, or a list field of it, e.g. ``{"customers": [...]}``), where the first
  entity has a field named like an id given in the RUN_STARTED input (``customer_id``, any
  ``*_id``) with another value; a later WRITE "names" that entity when one of its argument
  values equals a value of the first entity that no other match shares (its email, its id),
  never a shared one (the phone number that was looked up);
- policy denials (DENY records) and whether the agent attempted the action anyway
  (an ACTION_REFUSED with the same action hash); approval refusals (ACTION_REFUSED);
- FIXTURE_MISS events (replays), the RUN_FAILED error type and the outcome;
- authority violations: a write dispatched (any status past PLANNED) although
  the run's recorded policy denied that action (decision by input hash = action hash), required
  an approval no APPROVED record gives, or never decided on it — only in a run that records
  policy decisions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from models import (
    ApprovalDecision,
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecision,
    PolicyDecisionRecord,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolOutcome,
)
from models.signatures import (
    AuthorityFact,
    FailureFacts,
    FixtureMissFact,
    NonUniqueLookupFact,
    PolicyDenialFact,
    RefusalFact,
    SideEffectFacts,
)
from runtime.ports import EventLedger, EvidenceReader

__all__ = ["gather_failure_facts"]

E = ExecutionEventType
_TYPES = frozenset(
    {
        E.RUN_STARTED,
        E.TOOL_CALL,
        E.SIDE_EFFECT,
        E.ACTION_REFUSED,
        E.FIXTURE_MISS,
        E.RUN_FAILED,
        E.RUN_COMPLETED,
    }
)


def _applied(record: SideEffectRecord) -> bool:
    return record.status is SideEffectStatus.CONFIRMED or (
        record.status is SideEffectStatus.RECONCILED and record.reconciled_applied is True
    )


def _side_effects(
    records: Sequence[SideEffectRecord], history: dict[str, list[str]]
) -> tuple[SideEffectFacts, ...]:
    # the projection is ordered by last update; the events give the order of first appearance
    order = {effect_id: i for i, effect_id in enumerate(history)}
    groups: dict[tuple[str, str], list[SideEffectRecord]] = {}
    for record in sorted(records, key=lambda r: order.get(r.side_effect_id, len(order))):
        groups.setdefault((record.capability_id, record.action_hash), []).append(record)
    facts = []
    for (capability_id, _), group in groups.items():
        statuses = [s for r in group for s in history.get(r.side_effect_id, [r.status.value])]
        applied = sum(_applied(r) for r in group)
        unresolved = sum(r.status is SideEffectStatus.UNKNOWN for r in group)
        first = group[0]
        facts.append(
            SideEffectFacts(
                capability_id=capability_id,
                final_status=first.status,
                outcome_was_unknown=SideEffectStatus.UNKNOWN.value in statuses,
                reconciled_applied=first.reconciled_applied,
                retry_attempted=statuses.count(SideEffectStatus.EXECUTING.value) > 1,
                duplicated=True if applied >= 2 else None if applied + unresolved >= 2 else False,
                side_effect_ids=tuple(r.side_effect_id for r in group),
            )
        )
    return tuple(facts)


def _entities(response: Any) -> list[dict[str, Any]]:
    """The first list of ≥2 objects in a response: the response itself or one of its fields."""
    lists = [response] if isinstance(response, list) else []
    if isinstance(response, dict):
        lists += [value for value in response.values() if isinstance(value, list)]
    for items in lists:
        if len(items) >= 2 and all(isinstance(item, dict) for item in items):
            return items
    return []


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of every scalar in a JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def _nonunique_lookups(
    fixtures: list[dict[str, Any]], agent_input: Any
) -> tuple[NonUniqueLookupFact, ...]:
    asked = {
        k: v
        for k, v in (agent_input.items() if isinstance(agent_input, dict) else ())
        if (k == "id" or k.endswith("_id")) and isinstance(v, str)
    }
    found = []
    for i, fixture in enumerate(fixtures):
        if (
            fixture.get("side_effect_class") != SideEffectClass.READ.value
            or fixture.get("outcome") != ToolOutcome.SUCCESS.value
        ):
            continue
        entities = _entities(fixture.get("sanitized_response"))
        if not entities:
            continue
        first, others = entities[0], entities[1:]
        shared = [k for k in sorted(first) if k in asked and isinstance(first[k], str)]
        # one id that agrees with the input makes the first match the entity asked about
        if not shared or any(first[k] == asked[k] for k in shared):
            continue
        id_field = shared[0]
        # values that identify the first match alone: a shared value (the phone number that
        # was looked up) in a write says nothing about which entity the write went to
        own = {
            v
            for k, v in first.items()
            if isinstance(v, str) and v and all(o.get(k) != v for o in others)
        }
        write = next(
            (
                (later["capability_id"], path)
                for later in fixtures[i + 1 :]
                if later.get("side_effect_class") == SideEffectClass.WRITE.value
                for path, value in _leaves(later.get("sanitized_request"))
                if isinstance(value, str) and value in own
            ),
            (None, None),
        )
        request = fixture.get("sanitized_request")
        found.append(
            NonUniqueLookupFact(
                capability_id=fixture["capability_id"],
                key_names=tuple(sorted(request)) if isinstance(request, dict) else (),
                match_count=len(entities),
                id_field=id_field,
                asked_id=asked[id_field],
                taken_id=first[id_field],
                write_capability_id=write[0],
                write_field=write[1],
            )
        )
    return tuple(found)


def _policy_denials(
    policies: Sequence[PolicyDecisionRecord], refusals: list[dict[str, Any]]
) -> tuple[PolicyDenialFact, ...]:
    refused = {r.get("action_hash") for r in refusals if r.get("error") == "PolicyDeniedError"}
    denials, matched = [], set()
    for decision in policies:
        if decision.decision is not PolicyDecision.DENY:
            continue
        policy_input = (
            decision.sanitized_input if isinstance(decision.sanitized_input, dict) else {}
        )
        capability = policy_input.get("capability")
        # a write's policy input hashes to its action hash (``decide_action``)
        attempted = decision.input_hash in refused
        matched.add(decision.input_hash)
        denials.append(
            PolicyDenialFact(
                policy_id=decision.policy_id,
                capability_id=capability if isinstance(capability, str) else None,
                attempted=attempted,
            )
        )
    for refusal in refusals:  # a refusal whose decision was not recorded in this run
        if (
            refusal.get("error") == "PolicyDeniedError"
            and refusal.get("action_hash") not in matched
        ):
            denials.append(PolicyDenialFact(capability_id=refusal["capability_id"], attempted=True))
    return tuple(denials)


def _authority_violations(
    records: Sequence[SideEffectRecord],
    history: dict[str, list[str]],
    policies: Sequence[PolicyDecisionRecord],
    approvals: Sequence[ApprovalRecord],
) -> tuple[AuthorityFact, ...]:
    """Writes that reached the provider beyond their grant. Only a run that records policy
    decisions can show one: where nothing was recorded, absence proves nothing."""
    if not policies:
        return ()
    decided = {d.input_hash: d for d in policies}
    approved = {a.action_hash for a in approvals if a.decision is ApprovalDecision.APPROVED}
    found: list[AuthorityFact] = []
    for record in records:
        statuses = history.get(record.side_effect_id, [record.status.value])
        if set(statuses) <= {SideEffectStatus.PLANNED.value}:
            continue  # planned, never dispatched
        decision = decided.get(record.action_hash)
        reason = (
            "ungranted"
            if decision is None
            else "denied"
            if decision.decision is PolicyDecision.DENY
            else "unapproved"
            if decision.decision is PolicyDecision.REQUIRE_APPROVAL
            and record.action_hash not in approved
            else None
        )
        if reason is not None:
            fact = AuthorityFact(capability_id=record.capability_id, reason=reason)
            if fact not in found:
                found.append(fact)
    return tuple(found)


async def gather_failure_facts(
    ledger: EventLedger, evidence: EvidenceReader, run_id: str
) -> FailureFacts:
    """The structured facts of run ``run_id`` (see the module docstring); reads, never writes."""
    agent_input: Any = None
    fixtures: list[dict[str, Any]] = []
    history: dict[str, list[str]] = {}
    refusals: list[dict[str, Any]] = []
    misses: list[FixtureMissFact] = []
    error: str | None = None
    completed, outcome = False, None
    for event, data in await ledger.events_with_payloads(run_id, types=_TYPES):
        payload = json.loads(data or b"null")
        if event.type is E.RUN_STARTED:
            agent_input = payload.get("input")
        elif event.type is E.TOOL_CALL:
            fixtures.append(payload)
        elif event.type is E.SIDE_EFFECT:
            history.setdefault(payload["side_effect_id"], []).append(payload["status"])
        elif event.type is E.ACTION_REFUSED:
            refusals.append(payload)
        elif event.type is E.FIXTURE_MISS:
            misses.append(
                FixtureMissFact(capability_id=payload["capability_id"], policy=payload["policy"])
            )
        elif event.type is E.RUN_FAILED:
            error, completed = payload.get("error"), False
            outcome = {"error": error, "message": payload.get("message")}
        elif event.type is E.RUN_COMPLETED:
            completed, outcome = True, payload.get("outcome")
    records = await evidence.records(SideEffectRecord, run_id)
    policies = await evidence.records(PolicyDecisionRecord, run_id)
    approvals = await evidence.records(ApprovalRecord, run_id)
    return FailureFacts(
        run_id=run_id,
        completed=completed,
        run_error_type=error,
        outcome=outcome,
        side_effects=_side_effects(records, history),
        nonunique_lookups=_nonunique_lookups(fixtures, agent_input),
        policy_denials=_policy_denials(policies, refusals),
        approval_refusals=tuple(
            RefusalFact(capability_id=r["capability_id"], error=r["error"])
            for r in refusals
            if str(r.get("error", "")).startswith("Approval")
        ),
        fixture_misses=tuple(misses),
        authority_violations=_authority_violations(records, history, policies, approvals),
    )
