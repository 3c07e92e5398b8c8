"""Versioned policies; every decision is recorded with its (sanitized) input and reasons."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from models import ExecutionEventType, PolicyDecision, PolicyDecisionRecord
from models.canonical import canonical_hash
from models.errors import UnknownCapabilityError
from runtime.recorder import RunRecorder

Rule = Callable[[Mapping[str, Any]], tuple[PolicyDecision, list[str]]]
Sanitize = Callable[[Any], Any]


@dataclass(frozen=True)
class Policy:
    policy_id: str
    version: str
    evaluate: Rule


class PolicySet:
    """The policies in force, under one version the run pins."""

    def __init__(self, version: str, policies: Iterable[Policy]) -> None:
        self.version = version
        self.policies = {p.policy_id: p for p in policies}

    def get(self, policy_id: str) -> Policy:
        try:
            return self.policies[policy_id]
        except KeyError:
            raise UnknownCapabilityError(
                f"policy {policy_id!r} is not in policy set {self.version}"
            ) from None


class WritePolicy(Protocol):
    """What a tool gateway asks before a write: a ``RecordingPolicyEngine``, or a stand-in
    that always answers from ``decision_for`` (an imported agent's policy is not deployed)."""

    def decision_for(self, input_hash: str) -> PolicyDecisionRecord | None: ...

    async def decide(
        self, policy_id: str, policy_input: Mapping[str, Any]
    ) -> PolicyDecisionRecord: ...


class RecordingPolicyEngine:
    def __init__(
        self, policies: PolicySet, recorder: RunRecorder, sanitize: Sanitize = lambda v: v
    ) -> None:
        self.policies = policies
        self.recorder = recorder
        self.sanitize = sanitize
        self._by_input_hash: dict[str, PolicyDecisionRecord] = {}

    def remember(self, decisions: Iterable[PolicyDecisionRecord]) -> None:
        """Decisions already taken in this run by an earlier process (a replay step activity)."""
        for decision in decisions:
            self._by_input_hash[decision.input_hash] = decision

    def decisions(self) -> list[PolicyDecisionRecord]:
        """Every decision known in this run (remembered and taken here)."""
        return list(self._by_input_hash.values())

    def decision_for(self, input_hash: str) -> PolicyDecisionRecord | None:
        """The decision already taken in this run on an input with this hash (for a write:
        its action hash), so the tool gateway does not decide the same action twice."""
        return self._by_input_hash.get(input_hash)

    async def decide(self, policy_id: str, policy_input: Mapping[str, Any]) -> PolicyDecisionRecord:
        policy = self.policies.get(policy_id)
        decision, reasons = policy.evaluate(policy_input)
        record = PolicyDecisionRecord(
            policy_id=policy.policy_id,
            policy_version=policy.version,
            input_hash=canonical_hash(self.recorder.hashing_view(dict(policy_input))),
            sanitized_input=self.sanitize(dict(policy_input)),
            decision=decision,
            reasons=tuple(reasons),
            run_id=self.recorder.run_id,
            step_id=self.recorder.step_id,
        )
        await self.recorder.record(ExecutionEventType.POLICY_DECISION, record=record)
        self._by_input_hash[record.input_hash] = record
        return record

    async def decide_action(
        self, policy_id: str, capability_id: str, arguments: Mapping[str, Any]
    ) -> PolicyDecisionRecord:
        """Decide on one concrete action; the input hash is then the action hash."""
        return await self.decide(
            policy_id, {"capability": capability_id, "arguments": dict(arguments)}
        )
