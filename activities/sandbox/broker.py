"""The parent side of a sandboxed step: it holds the stores and serves the step only what its
replay's plan allows (``guard.ReplayGuard`` decides, from the plan and the source run).

Served: reads of the source run and of the replay's own run (events, payloads, records, and
the artifacts their evidence, the plan or the batch itself names: ``scope``); appends (in
sequence, sanitized with the source's redaction policy) and the final status of the replay's
own run; model calls in the modes that call a model, to the model the plan names, within the
budget the worker counts; live READ tool calls of the source graph's capabilities on a fixture
miss under ``SANDBOX_LIVE``, at a logical time the source recorded. Anything else — another
run (its records or artifacts by key or digest too), another graph, a write capability, an
unknown call, malformed parameters — is refused with ``SandboxViolationError`` and poisons the
batch: every later call of it is refused too, so code that catches the refusal cannot go on
and record a step as if nothing happened. Past a quota (bytes written per replay, calls per
batch) calls are refused with ``SandboxQuotaError`` and the replay stops with a partial result.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from activities.sandbox import codec
from activities.sandbox.guard import OverQuota, Quotas, Refused, ReplayGuard
from activities.sandbox.scope import EvidenceScope
from activities.sandbox.source_windows import SourceServer
from models import ExecutionEvent, ExecutionEventType, RunStatus
from models.budget import BudgetUsage
from models.errors import (
    ModelProviderError,
    ReplaybookError,
    SandboxQuotaError,
    SandboxViolationError,
)
from models.model_call import ModelRequest
from models.privacy import RunSubject, SubjectKind
from models.replay_flow import StepInput
from runtime.ports import raw_vault
from runtime.replay.engine import ReplayEngine
from runtime.tools import ToolCallContext

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
#: refusals kept for the replay's record (a loop of refused calls would not fit in an event)
KEPT_REFUSALS = 20


class StepBroker:
    def __init__(self, engine: ReplayEngine, step: StepInput, guard: ReplayGuard) -> None:
        self.engine = engine
        self.guard = guard
        plan = step.plan
        self.replay_id = plan.replay_id
        self.readable = frozenset({plan.source_run_id, plan.replay_id})
        #: the only evidence this batch may read (``scope``): the source's and the replay's
        self.scope = EvidenceScope(engine, step)
        #: calls refused, in order (reported with the step's failure)
        self.refused: list[str] = []
        #: what each refusal or quota was about (``agent_replay_sandbox_violation_total``)
        self.kinds: list[str] = []
        #: the first refusal: the batch ends in a SandboxViolationError naming it
        self.violation: str | None = None
        #: the quota that ran out: the replay stops with a partial result naming it
        self.over_quota: str | None = None
        #: STEP_COMPLETED events appended for this batch
        self.completed_steps = 0
        source = SourceServer(engine, plan.source_run_id)
        self._handlers: dict[str, Handler] = {
            # the source's decoded evidence, a window at a time (the child never loads it all)
            "source.header": source.header,
            "source.items": source.items,
            "source.fixtures": source.fixtures,
            "source.lookup": source.lookup,
            "source.fork": source.fork,
            "ledger.get_run": self._get_run,
            "ledger.events": self._events,
            "ledger.events_with_payloads": self._events_with_payloads,
            "ledger.payload": self._payload,
            "ledger.append_many": self._append_many,
            "ledger.finish_run": self._finish_run,
            "evidence.records": self._records,
            "evidence.record": self._record,
            "artifacts.get": self._get,
            "artifacts.exists": self._exists,
            "artifacts.put": self._put,
            "model.complete": self._complete,
            "tool.read": self._tool_read,
            "tool.allow": self._tool_allow,
            "vault.record_artifact_raw": self._record_artifact_raw,
            "vault.add_subjects": self._add_subjects,
            # the carried puts of a job's end (stored by ``handle`` before this answers)
            "artifacts.flush": self._nothing,
        }

    @classmethod
    async def open(cls, engine: ReplayEngine, step: StepInput, quotas: Quotas) -> StepBroker:
        return cls(engine, step, await ReplayGuard.load(engine, step, quotas))

    @property
    def ended(self) -> bool:
        """A refusal or a quota ended this batch, whatever the child answers."""
        return self.violation is not None or self.over_quota is not None

    def usage(self) -> BudgetUsage:
        """The model usage of this batch, as the worker counted it."""
        return self.guard.usage()

    @property
    def written(self) -> int:
        return self.guard.written

    async def handle(
        self, method: str, params: dict[str, Any], puts: list[Any] | None = None
    ) -> Any:
        """Serve one call; ``puts`` (artifacts the child put since its last call, carried on
        this call's frame) are stored first, each checked and counted as a put of its own."""
        if self.over_quota is not None:
            raise SandboxQuotaError(
                f"{method} refused: the replay stopped ({self.over_quota})", retryable=False
            )
        if self.violation is not None:
            raise SandboxViolationError(
                f"{method} refused: an earlier call of this step was refused ({self.violation})",
                retryable=False,
            )
        handler = self._handlers.get(method)
        try:
            for put in puts or ():
                self.guard.count_call("artifacts.put")
                await self._put_carried(put)
            self.guard.count_call(method)
            if handler is None:
                raise Refused("unknown", f"{method!r} is not something a replay step may do")
            return await handler(params)
        except Refused as refused:
            raise self._refuse(refused.kind, refused.why) from None
        except OverQuota as over:
            self.stop(over.kind, over.why)
            raise SandboxQuotaError(f"sandbox quota: {over.why}", retryable=False) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # malformed parameters
            raise self._refuse("malformed", f"malformed {method!r}: {exc!r}") from None

    def stop(self, kind: str, why: str) -> None:
        """A quota ran out outside a call (the size of a message)."""
        self.kinds.append(kind)
        self.over_quota = self.over_quota or why

    def malformed(self, method: Any, exc: Exception) -> SandboxViolationError:
        return self._refuse("malformed", f"malformed call {method!r}: {exc!r}")

    def _refuse(self, kind: str, why: str) -> SandboxViolationError:
        if len(self.refused) < KEPT_REFUSALS:
            self.refused.append(why)
        self.kinds.append(kind)
        if self.violation is None:
            self.violation = why
        return SandboxViolationError(f"sandboxed step refused: {why}", retryable=False)

    def _readable(self, method: str, run_id: Any) -> str:
        if run_id not in self.readable:
            raise Refused(method, f"{method} of run {run_id!r} (only the source and the replay)")
        return str(run_id)

    def _own(self, method: str, run_id: Any) -> str:
        if run_id != self.replay_id:
            raise Refused(method, f"{method} to run {run_id!r} (only the replay's own run)")
        return str(run_id)

    # ledger ---------------------------------------------------------------------------------

    async def _get_run(self, p: dict[str, Any]) -> Any:
        run_id = self._readable("ledger.get_run", p["run_id"])
        return codec.dump_model(await self.engine.ledger.get_run(run_id))

    async def _events(self, p: dict[str, Any]) -> Any:
        events = await self.engine.ledger.events(
            self._readable("ledger.events", p["run_id"]),
            from_sequence=int(p.get("from_sequence", 1)),
        )
        return [e.model_dump(mode="json") for e in events]

    async def _events_with_payloads(self, p: dict[str, Any]) -> Any:
        types = p.get("types")
        loaded = await self.engine.ledger.events_with_payloads(
            self._readable("ledger.events_with_payloads", p["run_id"]),
            types=frozenset(ExecutionEventType(t) for t in types) if types is not None else None,
            missing_ok=bool(p.get("missing_ok", False)),
        )
        return [[e.model_dump(mode="json"), codec.b64(data)] for e, data in loaded]

    async def _payload(self, p: dict[str, Any]) -> Any:
        event = ExecutionEvent.model_validate(p["event"])
        self._readable("ledger.payload", event.run_id)
        if event.payload_ref.startswith("cas:"):  # the event is the child's word: its digest too
            await self.scope.artifact("ledger.payload", event.payload_ref[len("cas:") :])
        return codec.b64(await self.engine.ledger.payload(event))

    async def _append_many(self, p: dict[str, Any]) -> Any:
        run_id = self._own("ledger.append_many", p["run_id"])
        expected = p.get("expected_sequence")
        if expected is None:  # the ledger checks the position only when it is given
            raise Refused("ledger.append_many", "ledger.append_many without expected_sequence")
        events = [self.guard.sanitized_event(codec.load_new_event(e)) for e in p["events"]]
        self.guard.write("ledger.append_many", len(json.dumps(p["events"])))
        appended = await self.engine.ledger.append_many(
            run_id, events, expected_sequence=int(expected)
        )
        self.scope.grew(events, appended)
        self.completed_steps += sum(
            1 for e in appended if e.type is ExecutionEventType.STEP_COMPLETED
        )
        self.guard.steps_completed = self.completed_steps  # the replay's write allowance
        return [e.model_dump(mode="json") for e in appended]

    async def _finish_run(self, p: dict[str, Any]) -> Any:
        run = await self.engine.ledger.finish_run(
            self._own("ledger.finish_run", p["run_id"]), RunStatus(p["status"]), p.get("outcome")
        )
        return codec.dump_model(run)

    async def _record_artifact_raw(self, p: dict[str, Any]) -> Any:
        run_id = self._own("vault.record_artifact_raw", p["run_id"])
        vault = raw_vault(self.engine.ledger)
        if vault is None:  # this ledger keeps no raw views: nothing to seal
            return None
        raw = codec.unb64(p["raw"]) or b""
        self.guard.write("vault.record_artifact_raw", len(raw))
        await vault.record_artifact_raw(
            run_id, raw, str(p["sanitized_hash"]), str(p["policy_version"]), p.get("subject_id")
        )
        return None

    async def _add_subjects(self, p: dict[str, Any]) -> Any:
        """People whose records a live read gave the replay: subjects of its own run, so a
        deletion of any of them shreds it (only ever ``PERSON`` subjects, never a new primary)."""
        run_id = self._own("vault.add_subjects", p["run_id"])
        subjects = [RunSubject.model_validate(s) for s in p.get("subjects") or ()]
        if any(s.kind is not SubjectKind.PERSON for s in subjects):
            raise Refused("vault.add_subjects", "vault.add_subjects of a subject not a PERSON")
        vault = raw_vault(self.engine.ledger)
        if vault is not None and subjects:
            await vault.add_subjects(run_id, subjects)
        return None

    # evidence and artifacts ------------------------------------------------------------------

    async def _records(self, p: dict[str, Any]) -> Any:
        records = await self.engine.evidence.records(
            codec.record_type(p["type"]), self._readable("evidence.records", p["run_id"])
        )
        return [codec.dump_model(r) for r in records]

    async def _record(self, p: dict[str, Any]) -> Any:
        record_type, key = codec.record_type(p["type"]), str(p["key"])
        record = await self.engine.evidence.record(record_type, key)
        await self.scope.record("evidence.record", record_type, key, record)
        return codec.dump_model(record)

    async def _get(self, p: dict[str, Any]) -> Any:
        # content-addressed, but a digest is no permission: only the two runs' evidence
        digest = await self.scope.artifact("artifacts.get", p["digest"])
        return codec.b64(await self.engine.artifacts.get(digest))

    async def _put_carried(self, p: dict[str, Any]) -> None:
        """A put the child already named by its digest: stored only as it is (the child's
        recorder puts sanitized views, which sanitizing leaves alone) and under that digest."""
        data = codec.unb64(p["data"]) or b""
        if self.guard.sanitized_artifact(data) != data:
            raise Refused("artifacts.put", "a carried artifact that sanitizing would change")
        self.guard.write("artifacts.put", len(data))
        digest = await self.engine.artifacts.put(data)
        if digest != p["digest"]:
            raise Refused("artifacts.put", f"a carried artifact named {p['digest']!r} is {digest}")
        self.scope.stored.add(digest)

    async def _nothing(self, p: dict[str, Any]) -> Any:
        return None

    async def _exists(self, p: dict[str, Any]) -> Any:
        # existence is an answer too (a guessed content confirmed): the same scope as a read
        return await self.engine.artifacts.exists(
            await self.scope.artifact("artifacts.exists", p["digest"])
        )

    async def _put(self, p: dict[str, Any]) -> Any:
        # idempotent and content-addressed: it cannot overwrite anything recorded
        data = codec.unb64(p["data"]) or b""
        stored = self.guard.sanitized_artifact(data)
        self.guard.write("artifacts.put", len(stored))
        digest = await self.engine.artifacts.put(stored)
        self.scope.stored.add(digest)
        vault = raw_vault(self.engine.ledger)
        policy = self.guard.redaction
        if stored != data and vault is not None and policy is not None:
            # sent raw past the child's recorder: the raw view is sealed like a recorder's
            self.guard.write("artifacts.put", len(data))
            await vault.record_artifact_raw(self.replay_id, data, digest, policy.version, None)
        return digest

    # gateways --------------------------------------------------------------------------------

    async def _complete(self, p: dict[str, Any]) -> Any:
        self.guard.allow_model(p["graph_id"], p["model"])
        provider = self.guard.catalog.model(str(p["model"]))
        request = ModelRequest.model_validate(p["request"])
        self.guard.count_model_call()  # an attempt counts, answered or not
        try:
            response = await provider.complete(request)
        except ReplaybookError:
            raise
        except Exception as exc:  # the provider's own failure, not the child's: answered
            raise ModelProviderError(f"model {p['model']!r}: {type(exc).__name__}: {exc}") from None
        self.guard.count_model(response)
        return response.model_dump(mode="json")

    async def _tool_read(self, p: dict[str, Any]) -> Any:
        capability = str(p["capability_id"])
        arguments = dict(p["arguments"])
        logical_time = await self.guard.allow_tool_read(
            p["graph_id"], p["capability_id"], arguments, p["context"]
        )
        providers = await self.guard.catalog.read_providers()  # READ capabilities only
        if capability not in providers:
            raise Refused("tool.read", f"tool.read of {capability!r}, which has no READ provider")
        # the replay's own run id and a time the source recorded, whatever the child named
        context = ToolCallContext(run_id=self.replay_id, logical_time=logical_time)
        return await providers[capability](arguments, context)

    async def _tool_allow(self, p: dict[str, Any]) -> Any:
        """A live read the team's tools module answers inside the sandbox (``--tools-module``):
        allowed as ``tool.read`` is, for a READ tool the pinned module declares; the answer is
        the logical time to call it with (a time the source recorded)."""
        capability = str(p["capability_id"])
        team = self.guard.plan.tools_module
        if team is None or capability not in team.read_tools:
            raise Refused(
                "tool.allow",
                f"tool.allow of {capability!r}: no READ tool of the plan's tools module",
            )
        logical_time = await self.guard.allow_tool_read(
            p["graph_id"], capability, dict(p["arguments"]), p["context"]
        )
        return logical_time.isoformat()
