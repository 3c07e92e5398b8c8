"""Replay flavours of the clock, model, tools, knowledge and approvals.

Nothing here reaches today's world unless a mode says so: tools answer from fixtures matched
by canonical request hash, WRITEs are never executed (the recorded result when the request
matches, a dry run when it does not, each attempt counted and recorded as WRITE_BLOCKED), the
clock reproduces the recorded readings, retrieval returns the recorded evidence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import JsonValue

from models import (
    ApprovalRecord,
    ExecutionEventType,
    FixtureMissPolicy,
    PolicyDecision,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.budget import BudgetUsage
from models.errors import (
    BudgetExhaustedError,
    FixtureMissError,
    InvalidInputError,
    PolicyDeniedError,
    UnknownCapabilityError,
)
from models.model_call import ModelRequest, ModelResponse
from models.replay import ReplayBudget
from runtime.approvals import action_hash, check_approval
from runtime.capabilities import CapabilityRegistry
from runtime.policy import WritePolicy
from runtime.ports import AttributedToolProvider, ModelProvider
from runtime.providers.capabilities import PricedProvider
from runtime.recorder import RunRecorder
from runtime.replay.source import ReplaySource
from runtime.tools import ToolCallContext, ToolProvider, ToolResult, record_tool_call, request_hash

E = ExecutionEventType


@dataclass
class StepLedger:
    """Mutable positions and counters during one replay step."""

    model_calls: int = 0
    clock_reads: int = 0
    fixtures: dict[str, int] = field(default_factory=dict)
    retrievals: dict[str, int] = field(default_factory=dict)
    writes_blocked: int = 0
    fixture_misses: int = 0
    sandbox_live_calls: int = 0
    live_model_calls: int = 0
    tokens: int = 0
    cost: Decimal = Decimal(0)

    def usage(self) -> BudgetUsage:
        return BudgetUsage(model_calls=self.live_model_calls, tokens=self.tokens, cost=self.cost)


class FixedAgentClock:
    """Returns the recorded clock readings in order (rule 6); past the last one it stays there."""

    def __init__(
        self, source: ReplaySource, positions: StepLedger, recorder: RunRecorder | None = None
    ) -> None:
        self.source = source
        self.positions = positions
        self.recorder = recorder
        self.current = (
            source.clock_at(positions.clock_reads - 1)
            if positions.clock_reads
            else source.start_time
        )

    def now(self) -> datetime:
        value = self.source.clock_at(self.positions.clock_reads)
        self.positions.clock_reads += 1
        self.current = value
        if self.recorder is not None:
            self.recorder.buffer_clock_read(value)
        return value

    def logical_time(self) -> datetime:
        return self.current


class RecordedModelProvider:
    """Zero model calls: the source run's responses, in order (the ``recorded`` mode)."""

    def __init__(self, source: ReplaySource, positions: StepLedger) -> None:
        self.source = source
        self.positions = positions
        self.profile = f"recorded:{source.run.pinned.model_profile}"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        index = self.positions.model_calls
        response = self.source.model_response(index)
        if response is None:
            raise FixtureMissError(
                f"the source run recorded {self.source.model_call_count()} model calls; the replay "
                f"asked for call {index + 1}",
                capability_id="model",
            )
        self.positions.model_calls += 1
        return response


class LiveModelProvider:
    """A live model under a budget, sampled with a seed of this replay (so repeats differ)."""

    def __init__(
        self,
        inner: ModelProvider,
        positions: StepLedger,
        budget: ReplayBudget,
        used_before: BudgetUsage,
        sampling_seed: int,
        *,
        recorded_seed: bool = False,
        max_loop_calls: int | None = None,
    ) -> None:
        self.inner = inner
        self.positions = positions
        self.budget = budget
        #: the plan's per-replay cap on a tool loop's live model calls (``ReplayPlan``)
        self.max_loop_calls = max_loop_calls
        self.used_before = used_before
        self.sampling_seed = sampling_seed
        #: EXACT keeps the seed the replayed code passes (the recorded one: its random state is
        #: the source's); the other live modes sample with a seed of the replay
        self.recorded_seed = recorded_seed
        self.profile = inner.profile

    def prepared(self, request: ModelRequest) -> ModelRequest:
        """``request`` as the next call sends it: ``max_tokens`` within the budget and the
        sampling seed of this replay's next call (``BudgetExhaustedError`` when it does not fit).
        Idempotent, and counts nothing: the tool loop records the body it compiles from this
        before the call (``complete`` prepares it again and gets the same request)."""
        request = self._within_budget(request)
        seed = int.from_bytes(
            hashlib.sha256(f"{self.sampling_seed}:{self.positions.model_calls}".encode()).digest()[
                :4
            ],
            "big",
        )
        if self.recorded_seed and request.seed is not None:
            seed = request.seed
        return request.model_copy(update={"seed": seed})

    async def complete(self, request: ModelRequest) -> ModelResponse:
        request = self.prepared(request)
        self.positions.model_calls += 1
        response = await self.inner.complete(request)
        self.positions.live_model_calls += 1
        self.positions.tokens += response.usage.total_tokens
        self.positions.cost += response.cost
        used = self.used_before.plus(self.positions.usage())
        # a provider that ignores max_tokens can still go over: stop there, never call again
        if self.budget.max_tokens is not None and used.tokens > self.budget.max_tokens:
            raise BudgetExhaustedError(
                f"max_tokens {self.budget.max_tokens} exceeded ({used.tokens})"
            )
        if self.budget.max_cost is not None and used.cost > self.budget.max_cost:
            raise BudgetExhaustedError(f"max_cost {self.budget.max_cost} exceeded ({used.cost})")
        return response

    def _within_budget(self, request: ModelRequest) -> ModelRequest:
        """The request with ``max_tokens`` capped to what is left, or ``BudgetExhaustedError``
        before the call when its worst case (the prompt plus ``max_tokens``, priced at the
        model's price) would go past the budget (issue 16: refused before, not after)."""
        budget = self.budget
        used = self.used_before.plus(self.positions.usage())
        if budget.max_model_calls is not None and used.model_calls >= budget.max_model_calls:
            raise BudgetExhaustedError(f"max_model_calls {budget.max_model_calls} reached")
        if self.max_loop_calls is not None and used.model_calls >= self.max_loop_calls:
            raise BudgetExhaustedError(loop_cap_reached(self.max_loop_calls))
        prompt = estimated_prompt_tokens(request)
        room: list[int] = [request.max_tokens] if request.max_tokens else []
        if budget.max_tokens is not None:
            room.append(budget.max_tokens - used.tokens - prompt)
        price = model_price(self.inner)
        if budget.max_cost is not None and price:
            affordable = (budget.max_cost - used.cost) * 1000 / price
            room.append(int(affordable) - prompt)
        if not room:
            return request
        cap = min(room)
        if cap < 1:
            raise BudgetExhaustedError(
                f"the next model call (about {prompt} prompt tokens) does not fit in what is "
                f"left of the budget (max_tokens {budget.max_tokens}, max_cost "
                f"{budget.max_cost}; used {used.tokens} tokens, {used.cost})"
            )
        return request.model_copy(update={"max_tokens": cap})


def loop_cap_reached(cap: int) -> str:
    """Why a tool loop's replay stopped at its per-replay cap (``ReplayPlan.max_loop_calls``)."""
    return f"max_loop_calls {cap} reached (the per-replay cap on a tool loop's model calls)"


def estimated_prompt_tokens(request: ModelRequest) -> int:
    """About how many tokens the request's messages are (4 characters a token, as the
    recorder estimates compiled prompts): the part of a call's cost known before it."""
    return sum(max(1, len(m.content or "") // 4) for m in request.messages)


def model_price(provider: object) -> Decimal | None:
    """The provider's price per 1,000 tokens when it declares one (``price_per_1k_tokens``),
    for refusing a call whose worst case would exceed the cost budget."""
    price = provider.price_per_1k_tokens if isinstance(provider, PricedProvider) else None
    return price if isinstance(price, Decimal) else None


def reads_of(
    registry: CapabilityRegistry, providers: Mapping[str, ToolProvider]
) -> dict[str, ToolProvider]:
    """The providers of ``registry``'s READ capabilities (unknown names are left out)."""
    reads: dict[str, ToolProvider] = {}
    for name, provider in providers.items():
        try:
            if not registry.get(name).is_write:
                reads[name] = provider
        except UnknownCapabilityError:  # a tool of another run (the generic tool loop)
            continue
    return reads


class ReplayToolGateway:
    """Same interface as the recording gateway; answers from fixtures, never executes a WRITE."""

    def __init__(
        self,
        registry: CapabilityRegistry,
        read_providers: Mapping[str, ToolProvider],
        recorder: RunRecorder,
        policy: WritePolicy,
        write_policy_id: str,
        source: ReplaySource,
        positions: StepLedger,
        miss_policy: FixtureMissPolicy,
    ) -> None:
        self.registry = registry
        # only READ providers are ever handed to a replay: no write credential is held here
        self.offered_reads = read_providers
        self.read_providers = reads_of(registry, read_providers)
        self.recorder = recorder
        self.policy = policy
        self.write_policy_id = write_policy_id
        self.source = source
        self.positions = positions
        self.miss_policy = miss_policy

    def _next_fixture(self, rhash: str) -> ToolFixture | None:
        used = self.positions.fixtures.get(rhash, 0)
        fixture = self.source.fixture(rhash, used)
        if fixture is not None:
            self.positions.fixtures[rhash] = used + 1
            return fixture
        # consumed, not reused: the (k+1)-th identical request when k were recorded is a miss
        # (the miss policy decides), never the last recorded answer again
        return None

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
        rhash = request_hash(capability_id, self.recorder.hashing_view(arguments))
        try:
            self.registry.validate_arguments(capability_id, arguments)
        except InvalidInputError as exc:
            return await self._record(
                tool_call_id,
                capability_id,
                arguments,
                {"error": str(exc)},
                ToolOutcome.ERROR,
                started,
            )
        if capability.is_write:
            return await self._blocked_write(
                capability_id, arguments, approval, tool_call_id, started
            )
        fixture = self._next_fixture(rhash)
        if fixture is not None:
            return await self._record(
                tool_call_id or fixture.tool_call_id,
                capability_id,
                arguments,
                fixture.sanitized_response,
                fixture.outcome,
                started,
            )
        return await self._miss(capability_id, arguments, tool_call_id, started, rhash)

    async def _miss(
        self,
        capability_id: str,
        arguments: dict[str, Any],
        call_id: str | None,
        started: datetime,
        rhash: str,
    ) -> ToolResult:
        capability = self.registry.get(capability_id)
        self.positions.fixture_misses += 1
        policy = self.miss_policy
        if policy is FixtureMissPolicy.SANDBOX_LIVE and not (
            capability.sandbox_live_allowed and capability_id in self.read_providers
        ):
            policy = FixtureMissPolicy.FAIL  # sandbox-live only for READ capabilities that allow it
        payload: dict[str, Any] = {
            "capability_id": capability_id,
            "request_hash": rhash,
            "policy": policy.value,
            "requested": self.miss_policy.value,
        }
        read = self.read_providers.get(capability_id)
        answered_by = read.answered_by if isinstance(read, AttributedToolProvider) else None
        if policy is FixtureMissPolicy.SANDBOX_LIVE and answered_by is not None:
            payload["answered_by"] = answered_by  # a team's tools module (``--tools-module``)
        await self.recorder.record(E.FIXTURE_MISS, payload=payload)
        if policy is FixtureMissPolicy.STUB:
            return await self._record(
                call_id, capability_id, arguments, capability.stub, ToolOutcome.STUBBED, started
            )
        if policy is FixtureMissPolicy.SANDBOX_LIVE:
            self.positions.sandbox_live_calls += 1
            # called with the run's logical time, never today's (rule 6)
            context = ToolCallContext(
                run_id=self.recorder.run_id, logical_time=self.recorder.logical_time()
            )
            response = await self.read_providers[capability_id](arguments, context)
            return await self._record(
                call_id,
                capability_id,
                arguments,
                {**response, "sandbox_live": True},
                ToolOutcome.SUCCESS,
                started,
            )
        raise FixtureMissError(
            f"no recorded fixture for {capability_id} request {rhash} (fixture miss policy FAIL)",
            capability_id=capability_id,
        )

    async def _blocked_write(
        self,
        capability_id: str,
        arguments: dict[str, Any],
        approval: ApprovalRecord | None,
        call_id: str | None,
        started: datetime,
    ) -> ToolResult:
        ahash = action_hash(capability_id, self.recorder.hashing_view(arguments))
        await self._refuse_unless_allowed(capability_id, arguments, ahash, approval)
        recorded = self.source.side_effect(ahash)
        fixture = self.source.provider_fixture(recorded.provider_request_id) if recorded else None
        self.positions.writes_blocked += 1
        await self.recorder.record(
            E.WRITE_BLOCKED,
            payload={
                "capability_id": capability_id,
                "action_hash": ahash,
                "arguments": arguments,
                "answered_with": "recorded" if recorded else "dry_run",
                "source_side_effect_id": recorded.side_effect_id if recorded else None,
            },
        )
        if recorded is not None:
            response: JsonValue = (
                fixture.sanitized_response if fixture else {"status": recorded.status.value}
            )
            outcome = fixture.outcome if fixture else ToolOutcome.SUCCESS
            effect = recorded
        else:
            response = {"dry_run": True, "status": "NOT_EXECUTED", "capability_id": capability_id}
            outcome = ToolOutcome.DRY_RUN
            effect = SideEffectRecord(
                side_effect_id=f"dry-run-{ahash[7:31]}",
                run_id=self.recorder.run_id,
                step_id=self.recorder.step_id,
                capability_id=capability_id,
                idempotency_key=f"dry-run-{ahash[7:47]}",
                action_hash=ahash,
                status=SideEffectStatus.CONFIRMED,
                provider_receipt="dry-run: not executed",
            )
        result = await self._record(call_id, capability_id, arguments, response, outcome, started)
        return ToolResult(capability_id, outcome, response, result.fixture, effect)

    async def _refuse_unless_allowed(
        self,
        capability_id: str,
        arguments: dict[str, Any],
        ahash: str,
        approval: ApprovalRecord | None,
    ) -> None:
        """Refuse the write (ACTION_REFUSED recorded, then the error raised) when the write
        policy denies it or the approval it requires does not hold."""
        decision = self.policy.decision_for(ahash) or await self.policy.decide(
            self.write_policy_id, {"capability": capability_id, "arguments": arguments}
        )
        if decision.decision is PolicyDecision.DENY:
            await self.recorder.record(
                E.ACTION_REFUSED,
                payload={
                    "capability_id": capability_id,
                    "action_hash": ahash,
                    "error": "PolicyDeniedError",
                    "reason": "; ".join(decision.reasons),
                },
            )
            raise PolicyDeniedError(
                f"policy {decision.policy_id}@{decision.policy_version} denies {capability_id}: "
                + "; ".join(decision.reasons)
            )
        if decision.decision is PolicyDecision.REQUIRE_APPROVAL:
            try:
                check_approval(approval, ahash, self.recorder.logical_time())
            except Exception as exc:
                await self.recorder.record(
                    E.ACTION_REFUSED,
                    payload={
                        "capability_id": capability_id,
                        "action_hash": ahash,
                        "error": type(exc).__name__,
                        "reason": str(exc),
                    },
                )
                raise

    async def _record(
        self,
        call_id: str | None,
        capability_id: str,
        arguments: dict[str, Any],
        response: Any,
        outcome: ToolOutcome,
        started: datetime,
    ) -> ToolResult:
        fixture = await record_tool_call(
            self.recorder,
            self.registry,
            call_id or f"replay-call-{self.positions.model_calls}-{capability_id}",
            capability_id,
            arguments,
            response,
            outcome,
            started,
            request=arguments,
        )
        return ToolResult(capability_id, outcome, response, fixture, None)
