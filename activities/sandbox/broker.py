"""The parent side of a sandboxed step: it holds the stores and serves the step only what a
replay step may do.

Served: reads of the source run and of the replay's own run (events, payloads, records,
content-addressed artifacts), appends and the final status of the replay's own run, model
calls through the catalog's configured providers, and READ tool providers (for the
``SANDBOX_LIVE`` miss policy). Anything else — another run, deleting, legal holds, a write
provider — has no method here and is refused with ``SandboxViolationError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from activities.sandbox import codec
from models import ExecutionEvent, ExecutionEventType, RunStatus
from models.errors import SandboxViolationError
from models.model_call import ModelRequest
from models.replay_flow import ReplayPlan
from runtime.replay.engine import ReplayEngine
from runtime.tools import ToolCallContext

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class StepBroker:
    def __init__(self, engine: ReplayEngine, plan: ReplayPlan) -> None:
        self.engine = engine
        self.replay_id = plan.replay_id
        self.readable = frozenset({plan.source_run_id, plan.replay_id})
        #: calls refused, in order (reported with the step's failure)
        self.refused: list[str] = []
        self._handlers: dict[str, Handler] = {
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
            "vault.record_artifact_raw": self._record_artifact_raw,
        }

    async def handle(self, method: str, params: dict[str, Any]) -> Any:
        handler = self._handlers.get(method)
        if handler is None:
            raise self._refuse(f"{method!r} is not something a replay step may do")
        return await handler(params)

    def _refuse(self, why: str) -> SandboxViolationError:
        self.refused.append(why)
        return SandboxViolationError(f"sandboxed step refused: {why}")

    def _readable(self, run_id: Any) -> str:
        if run_id not in self.readable:
            raise self._refuse(f"reading run {run_id!r} (only the source and the replay)")
        return str(run_id)

    def _own(self, run_id: Any) -> str:
        if run_id != self.replay_id:
            raise self._refuse(f"writing run {run_id!r} (only the replay's own run)")
        return str(run_id)

    # ledger ---------------------------------------------------------------------------------

    async def _get_run(self, p: dict[str, Any]) -> Any:
        return codec.dump_model(await self.engine.ledger.get_run(self._readable(p["run_id"])))

    async def _events(self, p: dict[str, Any]) -> Any:
        events = await self.engine.ledger.events(
            self._readable(p["run_id"]), from_sequence=int(p.get("from_sequence", 1))
        )
        return [e.model_dump(mode="json") for e in events]

    async def _events_with_payloads(self, p: dict[str, Any]) -> Any:
        types = p.get("types")
        loaded = await self.engine.ledger.events_with_payloads(
            self._readable(p["run_id"]),
            types=frozenset(ExecutionEventType(t) for t in types) if types is not None else None,
            missing_ok=bool(p.get("missing_ok", False)),
        )
        return [[e.model_dump(mode="json"), codec.b64(data)] for e, data in loaded]

    async def _payload(self, p: dict[str, Any]) -> Any:
        event = ExecutionEvent.model_validate(p["event"])
        self._readable(event.run_id)
        return codec.b64(await self.engine.ledger.payload(event))

    async def _append_many(self, p: dict[str, Any]) -> Any:
        run_id = self._own(p["run_id"])
        events = [codec.load_new_event(e) for e in p["events"]]
        expected = p.get("expected_sequence")
        appended = await self.engine.ledger.append_many(
            run_id, events, expected_sequence=int(expected) if expected is not None else None
        )
        return [e.model_dump(mode="json") for e in appended]

    async def _finish_run(self, p: dict[str, Any]) -> Any:
        run = await self.engine.ledger.finish_run(
            self._own(p["run_id"]), RunStatus(p["status"]), p.get("outcome")
        )
        return codec.dump_model(run)

    async def _record_artifact_raw(self, p: dict[str, Any]) -> Any:
        vault = getattr(self.engine.ledger, "vault", None)
        if vault is None:  # this ledger keeps no raw views: nothing to seal
            return None
        await vault.record_artifact_raw(
            self._own(p["run_id"]),
            codec.unb64(p["raw"]) or b"",
            str(p["sanitized_hash"]),
            str(p["policy_version"]),
            p.get("subject_id"),
        )
        return None

    # evidence and artifacts ------------------------------------------------------------------

    async def _records(self, p: dict[str, Any]) -> Any:
        records = await self.engine.evidence.records(
            codec.record_type(p["type"]), self._readable(p["run_id"])
        )
        return [codec.dump_model(r) for r in records]

    async def _record(self, p: dict[str, Any]) -> Any:
        record = await self.engine.evidence.record(codec.record_type(p["type"]), str(p["key"]))
        run_id = getattr(record, "run_id", None)
        if run_id is not None:
            self._readable(run_id)
        return codec.dump_model(record)

    async def _get(self, p: dict[str, Any]) -> Any:
        # content-addressed: a digest is only known from evidence the step may read
        return codec.b64(await self.engine.artifacts.get(str(p["digest"])))

    async def _exists(self, p: dict[str, Any]) -> Any:
        return await self.engine.artifacts.exists(str(p["digest"]))

    async def _put(self, p: dict[str, Any]) -> Any:
        # idempotent and content-addressed: it cannot overwrite anything recorded
        return await self.engine.artifacts.put(codec.unb64(p["data"]) or b"")

    # gateways --------------------------------------------------------------------------------

    async def _complete(self, p: dict[str, Any]) -> Any:
        catalog = self.engine.catalog(str(p["graph_id"]))
        provider = catalog.model(str(p["model"]))
        response = await provider.complete(ModelRequest.model_validate(p["request"]))
        return response.model_dump(mode="json")

    async def _tool_read(self, p: dict[str, Any]) -> Any:
        catalog = self.engine.catalog(str(p["graph_id"]))
        capability = str(p["capability_id"])
        providers = await catalog.read_providers()  # READ capabilities only, by construction
        if capability not in providers:
            raise self._refuse(f"live call of {capability!r}, which has no READ provider")
        context = dict(p["context"])
        context["logical_time"] = datetime.fromisoformat(context["logical_time"])
        return await providers[capability](dict(p["arguments"]), ToolCallContext(**context))
