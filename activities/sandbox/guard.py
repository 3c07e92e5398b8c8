"""What one batch of a replay's sandboxed steps may do, decided in the worker.

Every answer comes from the replay's plan (as the workflow passed it) and its source run (as
the worker's own stores hold it); the child's arguments only ever name what it asks for, and
are checked against these. The child is untrusted as a whole: replayed code running inline in
it can reach the pipe and send any message the protocol allows, so its gateway's budget
count, its request hashes and its logical times are never taken on its word.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from models import FixtureMissPolicy, ReplayMode, RunRecord
from models.budget import BudgetUsage
from models.canonical import canonicalize
from models.errors import ReplaybookError
from models.model_call import ModelResponse
from models.redaction import RedactionPolicy
from models.replay_flow import StepInput
from runtime.ports import NewEvent
from runtime.privacy.redaction import replay_redaction
from runtime.replay.catalog import AgentCatalog, replay_model
from runtime.replay.engine import ReplayEngine
from runtime.replay.source import SourceEvidence
from runtime.tools import request_hash


class Refused(Exception):
    """A call the replay may not make (``kind`` counts it): the broker turns it into
    ``SandboxViolationError``. Never leaves this package."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind, self.why = kind, why


class OverQuota(Exception):
    """A quota ran out (``kind``): the broker turns it into ``SandboxQuotaError`` and the
    replay stops with a partial result."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind, self.why = kind, why


@dataclass
class Quotas:
    #: bytes one batch may write (a runaway step is stopped at it)
    write_bytes: int
    calls_per_batch: int
    message_bytes: int
    #: the replay's whole total may reach ``write_bytes`` plus this much per step it completed
    write_bytes_per_step: int = 256 * 1024


class ReplayGuard:
    """The plan's allowances and the worker's own counts for one batch of one replay."""

    def __init__(
        self,
        engine: ReplayEngine,
        step: StepInput,
        run: RunRecord,
        catalog: AgentCatalog,
        quotas: Quotas,
    ) -> None:
        self.engine = engine
        self.plan = step.plan
        self.run = run
        self.catalog = catalog
        self.quotas = quotas
        #: the source's redaction policy (None: recorded as given), applied to what the
        #: replay stores whatever the child did to it
        self.redaction: RedactionPolicy | None = replay_redaction(run, catalog.capabilities)
        #: budget used before this batch (the workflow's total of the worker's counts)
        self.used_before = step.usage
        #: this batch's model usage, counted here from the provider's responses
        self.calls = 0
        self.tokens = 0
        self.cost = Decimal(0)
        #: bytes the replay wrote, this batch included (carried between batches)
        self.written = step.written_bytes
        #: bytes this batch wrote (its own quota), and the replay's steps completed before it
        #: and in it (the replay's allowance grows with them; the broker counts the latter)
        self.batch_written = 0
        self.steps_before = step.step_index
        self.steps_completed = 0
        self.broker_calls = 0

    @classmethod
    async def load(cls, engine: ReplayEngine, step: StepInput, quotas: Quotas) -> ReplayGuard:
        run = await engine.ledger.get_run(step.plan.source_run_id)
        return cls(engine, step, run, engine.catalog(run.graph_id), quotas)

    def usage(self) -> BudgetUsage:
        return BudgetUsage(model_calls=self.calls, tokens=self.tokens, cost=self.cost)

    # quotas ---------------------------------------------------------------------------------

    def count_call(self, method: str) -> None:
        self.broker_calls += 1
        if self.broker_calls > self.quotas.calls_per_batch:
            raise OverQuota(
                "batch_calls",
                f"{method}: more than {self.quotas.calls_per_batch} calls in one batch "
                "(REPLAYBOOK_SANDBOX_MAX_CALLS_PER_BATCH)",
            )

    def write(self, method: str, size: int) -> None:
        """Count ``size`` bytes about to be stored; refused (nothing stored) past a quota.

        Two quotas (issue 35): one batch may write ``write_bytes`` (64 MiB by default), so a
        runaway step is stopped there whatever the replay did before; and the replay's total
        may reach ``write_bytes`` plus ``write_bytes_per_step`` per step completed so far, so
        a replay's evidence (every step's events and payloads, ~7 KB a step in a RECORDED
        replay) has room that grows with its length while a replay that writes a lot in
        every batch is still stopped. Every write counts: the recorder's and the replayed
        code's share one untrusted process, and the worker cannot tell them apart.
        """
        batch = self.batch_written + size
        if batch > self.quotas.write_bytes:
            raise OverQuota(
                "write_bytes",
                f"{method}: writing {size} bytes would bring this batch to {batch} bytes, "
                f"over its quota of {self.quotas.write_bytes} "
                "(REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES)",
            )
        steps = self.steps_before + self.steps_completed
        allowance = self.quotas.write_bytes + steps * self.quotas.write_bytes_per_step
        if self.written + size > allowance:
            raise OverQuota(
                "write_bytes",
                f"{method}: writing {size} bytes would bring the replay to "
                f"{self.written + size} bytes, over its allowance of {allowance} after {steps} "
                "steps (REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES + "
                "REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES_PER_STEP per step)",
            )
        self.written += size
        self.batch_written = batch

    # model calls ----------------------------------------------------------------------------

    def allow_model(self, graph_id: Any, model: Any) -> None:
        if self.plan.mode is ReplayMode.RECORDED:
            raise Refused(
                "model.complete", "model.complete in a RECORDED replay (zero model calls)"
            )
        if graph_id != self.run.graph_id:
            raise Refused(
                "model.complete",
                f"model.complete for graph {graph_id!r} (the replay's is {self.run.graph_id!r})",
            )
        try:  # the same resolution as the engine's: the recorded model unless swapped
            named = replay_model(
                self.catalog,
                self.plan.mode,
                self.plan.model_name,
                self.plan.substitute_model,
                self.run.pinned.model_profile,
            )
        except ReplaybookError as exc:
            raise Refused("model.complete", f"model.complete: {exc}") from None
        if model != named:
            raise Refused(
                "model.complete", f"model.complete of model {model!r} (the plan names {named!r})"
            )
        budget = self.plan.budget
        used = self.used_before.plus(self.usage())
        if budget.max_model_calls is not None and used.model_calls >= budget.max_model_calls:
            raise Refused(
                "model.complete",
                f"model.complete past the budget: max_model_calls {budget.max_model_calls} "
                f"reached (counted by the worker)",
            )
        cap = self.plan.loop_call_cap(self.run.graph_id, self.run.labels)
        if cap is not None and used.model_calls >= cap:
            raise Refused(
                "model.complete",
                f"model.complete past the replay's max_loop_calls {cap} (counted by the worker)",
            )
        # the gateway stops after the call that goes over; a further call is not the gateway's
        if budget.max_tokens is not None and used.tokens > budget.max_tokens:
            raise Refused("model.complete", f"model.complete past max_tokens {budget.max_tokens}")
        if budget.max_cost is not None and used.cost > budget.max_cost:
            raise Refused("model.complete", f"model.complete past max_cost {budget.max_cost}")

    def count_model_call(self) -> None:
        self.calls += 1

    def count_model(self, response: ModelResponse) -> None:
        self.tokens += response.usage.total_tokens
        self.cost += response.cost

    # live tool reads -------------------------------------------------------------------------

    async def allow_tool_read(
        self, graph_id: Any, capability_id: Any, arguments: dict[str, Any], context: Any
    ) -> datetime:
        """The logical time to call the READ provider with, when this live read is allowed."""

        def refuse(why: str) -> Refused:
            return Refused("tool.read", f"tool.read of {capability_id!r}: {why}")

        if self.plan.miss_policy is not FixtureMissPolicy.SANDBOX_LIVE:
            raise refuse(f"the replay's miss policy is {self.plan.miss_policy.value}")
        if graph_id != self.run.graph_id:
            raise refuse(f"graph {graph_id!r} is not the source run's ({self.run.graph_id!r})")
        registry = self.catalog.capabilities
        team = self.plan.tools_module
        if str(capability_id) in self.catalog.live_read_tools or (
            team is not None and str(capability_id) in team.read_tools
        ):
            # the generic tool loop: the source run's own tool catalogue says READ or WRITE
            from runtime.tool_loop.graph import source_registry

            source = await self.engine.source(self.plan.source_run_id)
            # the candidate tool catalogue, when one is swapped in, says READ or WRITE
            registry = await source_registry(
                self.engine.artifacts, self.plan.agent_input_for(source.agent_input)
            )
        try:
            capability = registry.get(str(capability_id))
            registry.validate_arguments(str(capability_id), arguments)
        except ReplaybookError as exc:
            raise refuse(str(exc)) from None
        if capability.is_write:
            raise refuse("a WRITE capability is never called from a replay")
        if not capability.sandbox_live_allowed:
            raise refuse("the capability does not allow live reads in replay")
        source = await self.engine.source(self.plan.source_run_id)
        view = self.redaction.sanitize(arguments) if self.redaction is not None else arguments
        if request_hash(str(capability_id), view) in source.fixtures:
            raise refuse("the source recorded this request (not a fixture miss)")
        return _logical_time(source, context, refuse)

    # evidence -------------------------------------------------------------------------------

    def sanitized_event(self, event: NewEvent) -> NewEvent:
        """``event`` as the source's redaction policy stores it (idempotent on what the child's
        recorder already sanitized; a raw payload sent past it is sanitized here)."""
        policy = self.redaction
        if policy is None:
            return event
        value = event.payload_json()
        sanitized = policy.sanitize(value)
        if sanitized == value and event.redaction_policy_version == policy.version:
            return event
        record = event.record
        if record is not None and sanitized != value:
            record = type(record).model_validate(sanitized)
        return NewEvent(
            step_id=event.step_id,
            type=event.type,
            logical_time=event.logical_time,
            record=record,
            payload=sanitized if record is None else None,
            event_id=event.event_id,
            # the raw view is only ever kept encrypted (the vault), never beside the payload
            raw=event.raw if event.raw is not None else canonicalize(value),
            redaction_policy_version=policy.version,
            subject_id=event.subject_id,
        )

    def sanitized_artifact(self, data: bytes) -> bytes:
        """The stored form of an artifact: JSON and text sanitized by the source's policy (the
        child's recorder stores sanitized JSON, which this leaves unchanged), other bytes as
        given (state and random state are JSON; binary cannot be sanitized, only counted)."""
        policy = self.redaction
        if policy is None:
            return data
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return data
        try:
            value = json.loads(text)
        except ValueError:
            sanitized_text = policy.sanitize(text)
            return data if sanitized_text == text else str(sanitized_text).encode()
        sanitized = policy.sanitize(value)
        if sanitized == value:
            return data
        try:
            return canonicalize(sanitized)
        except (ReplaybookError, ValueError):  # no canonical form (a huge int…): plain JSON
            return json.dumps(sanitized, sort_keys=True).encode()


def _logical_time(source: SourceEvidence, context: Any, refuse: Any) -> datetime:
    """The run's logical time the child names, only when it is one the source recorded (the
    start or a clock reading): a live read never runs at today's time or any other."""
    try:
        claimed = datetime.fromisoformat(str(dict(context)["logical_time"]))
    except (KeyError, TypeError, ValueError):
        raise refuse("no valid logical_time in its context") from None
    if claimed != source.start_time and claimed not in source.clock_reads:
        raise refuse(f"logical_time {claimed.isoformat()} is not a time the source run recorded")
    return claimed
