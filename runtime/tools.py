"""The recording tool gateway: every call becomes a ``ToolFixture`` keyed by the canonical
hash of ``{name, arguments}``; every WRITE goes through policy, approval and the side-effect
ledger before its provider is called."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import JsonValue

from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecision,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash
from models.errors import (
    ActionRefusedError,
    ApprovalError,
    InvalidInputError,
    PolicyDeniedError,
    ProviderRejectedError,
    SideEffectOutcomeUnknownError,
)
from runtime.approvals import action_hash, check_approval
from runtime.capabilities import CapabilityRegistry
from runtime.ids import new_hex
from runtime.policy import WritePolicy
from runtime.recorder import RunRecorder
from runtime.side_effects import SideEffectLedger


@dataclass(frozen=True)
class ToolCallContext:
    run_id: str
    logical_time: datetime
    idempotency_key: str | None = None
    provider_request_id: str | None = None


class ToolProvider(Protocol):
    async def __call__(
        self, arguments: dict[str, Any], context: ToolCallContext
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ToolResult:
    capability_id: str
    outcome: ToolOutcome
    response: JsonValue
    fixture: ToolFixture
    side_effect: SideEffectRecord | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is ToolOutcome.SUCCESS


def request_hash(capability_id: str, arguments: Mapping[str, Any]) -> str:
    """The fixture key: canonical hash of ``{"name", "arguments"}`` (rules 1 and 2)."""
    return canonical_hash({"name": capability_id, "arguments": dict(arguments)})


_STATUS_OUTCOME = {
    SideEffectStatus.CONFIRMED: ToolOutcome.SUCCESS,
    SideEffectStatus.FAILED: ToolOutcome.ERROR,
    SideEffectStatus.UNKNOWN: ToolOutcome.UNKNOWN,
}


class RecordingToolGateway:
    def __init__(
        self,
        registry: CapabilityRegistry,
        providers: Mapping[str, ToolProvider],
        recorder: RunRecorder,
        policy: WritePolicy,
        write_policy_id: str,
        sanitize: Callable[[Any], Any] = lambda v: v,
    ) -> None:
        self.registry = registry
        self.providers = providers
        self.recorder = recorder
        self.policy = policy
        self.write_policy_id = write_policy_id
        self.sanitize = sanitize
        self.side_effects = SideEffectLedger(recorder)

    async def call(
        self,
        capability_id: str,
        arguments: Mapping[str, Any],
        *,
        approval: ApprovalRecord | None = None,
        tool_call_id: str | None = None,
    ) -> ToolResult:
        capability = self.registry.get(capability_id)
        arguments = dict(arguments)
        started = self.recorder.logical_time()
        call_id = tool_call_id or f"call-{new_hex(12)}"
        try:
            self.registry.validate_arguments(capability_id, arguments)
        except InvalidInputError as exc:
            return await self._fixture(
                call_id, capability_id, arguments, {"error": str(exc)}, ToolOutcome.ERROR, started
            )
        context = ToolCallContext(run_id=self.recorder.run_id, logical_time=started)
        provider = self.providers[capability_id]
        if not capability.is_write:
            try:
                response = await provider(arguments, context)
                outcome = ToolOutcome.SUCCESS
            except ProviderRejectedError as exc:
                response, outcome = {"error": str(exc)}, ToolOutcome.ERROR
            except SideEffectOutcomeUnknownError as exc:
                response, outcome = {"error": str(exc)}, ToolOutcome.TIMEOUT
            return await self._fixture(
                call_id, capability_id, arguments, response, outcome, started
            )

        ahash = action_hash(capability_id, self.recorder.hashing_view(arguments))
        await self._authorize(capability_id, arguments, ahash, approval)

        async def send(key: str, preq: str) -> dict[str, Any]:
            ctx = ToolCallContext(self.recorder.run_id, self.recorder.logical_time(), key, preq)
            return await provider(arguments, ctx)

        effect, receipt = await self.side_effects.execute(
            capability_id=capability_id, step_id=self.recorder.step_id, action_hash=ahash, call=send
        )
        written: JsonValue = (
            receipt
            if receipt is not None
            else {"status": effect.status.value, "detail": effect.provider_receipt}
        )
        return await self._fixture(
            call_id,
            capability_id,
            arguments,
            written,
            _STATUS_OUTCOME[effect.status],
            started,
            effect,
        )

    async def _authorize(
        self,
        capability_id: str,
        arguments: dict[str, Any],
        ahash: str,
        approval: ApprovalRecord | None,
    ) -> None:
        """Policy, then approval; a refusal is recorded before it is raised."""
        decision = self.policy.decision_for(ahash)
        if decision is None:
            decision = await self.policy.decide(
                self.write_policy_id, {"capability": capability_id, "arguments": arguments}
            )
        try:
            if decision.decision is PolicyDecision.DENY:
                raise PolicyDeniedError(
                    f"policy {decision.policy_id}@{decision.policy_version} denies {capability_id}: "
                    + "; ".join(decision.reasons)
                )
            if decision.decision is PolicyDecision.REQUIRE_APPROVAL:
                check_approval(approval, ahash, self.recorder.logical_time())
        except (ApprovalError, ActionRefusedError) as exc:
            await self.recorder.record(
                ExecutionEventType.ACTION_REFUSED,
                payload={
                    "capability_id": capability_id,
                    "action_hash": ahash,
                    "error": type(exc).__name__,
                    "reason": str(exc),
                    "approval_id": approval.approval_id if approval else None,
                },
            )
            raise

    async def _fixture(
        self,
        call_id: str,
        capability_id: str,
        arguments: dict[str, Any],
        response: JsonValue,
        outcome: ToolOutcome,
        started: datetime,
        effect: SideEffectRecord | None = None,
    ) -> ToolResult:
        provider_request_id: JsonValue = effect.provider_request_id if effect else None
        if provider_request_id is None and isinstance(response, dict):
            provider_request_id = response.get("provider_request_id")
        fixture = await record_tool_call(
            self.recorder,
            self.registry,
            call_id,
            capability_id,
            self.sanitize(arguments),
            self.sanitize(response),
            outcome,
            started,
            request=arguments,
            provider_request_id=provider_request_id
            if isinstance(provider_request_id, str)
            else None,
        )
        return ToolResult(capability_id, outcome, response, fixture, effect)


async def record_tool_call(
    recorder: RunRecorder,
    registry: CapabilityRegistry,
    call_id: str,
    capability_id: str,
    sanitized_request: JsonValue,
    sanitized_response: JsonValue,
    outcome: ToolOutcome,
    started: datetime,
    *,
    request: Mapping[str, Any],
    provider_request_id: str | None = None,
) -> ToolFixture:
    """Record one tool call as a ``ToolFixture`` (TOOL_CALL event), keyed by the hash of the
    exact ``request``; the recording and the replay gateways both record through this."""
    capability = registry.get(capability_id)
    # names and people first: this very record is then stored with the names redacted
    await recorder.learn_people(capability, sanitized_response)
    fixture = ToolFixture(
        tool_call_id=call_id,
        capability_id=capability_id,
        # over the sanitized request: replay, which sees sanitized evidence, hashes the same
        request_hash=request_hash(capability_id, recorder.hashing_view(dict(request))),
        sanitized_request=sanitized_request,
        sanitized_response=sanitized_response,
        outcome=outcome,
        started_at=started,
        completed_at=recorder.logical_time(),
        provider_request_id=provider_request_id,
        run_id=recorder.run_id,
        step_id=recorder.step_id,
        side_effect_class=capability.side_effect_class,
    )
    await recorder.record(ExecutionEventType.TOOL_CALL, record=fixture)
    return fixture
