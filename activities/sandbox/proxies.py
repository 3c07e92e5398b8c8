"""The child side: the storage ports and gateways a replay step uses, as calls over the pipe.

Nothing here can reach a store or the network; each method is one request to the broker in
the worker, which decides whether a replay step may do it.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from activities.sandbox import codec
from models import ExecutionEvent, ExecutionEventType, HashedRecord, RunRecord, RunStatus
from models.chain import ChainVerification
from models.digest import sha256_digest
from models.errors import SandboxViolationError
from models.model_call import ModelRequest, ModelResponse
from models.privacy import RunSubject
from runtime.ports import NewEvent
from runtime.providers.wire import request_body
from runtime.replay.catalog import AgentCatalog
from runtime.replay.gateways import model_price
from runtime.tools import ToolCallContext, ToolProvider

Call = Callable[[str, dict[str, Any]], Any]


class ProxyVault:
    """Where the recorder keeps the raw form of a sanitized artifact (rule 17)."""

    def __init__(self, call: Call) -> None:
        self._call = call

    async def record_artifact_raw(
        self,
        run_id: str,
        raw: bytes,
        sanitized_hash: str,
        policy_version: str,
        subject_id: str | None,
    ) -> None:
        self._call(
            "vault.record_artifact_raw",
            {
                "run_id": run_id,
                "raw": codec.b64(raw),
                "sanitized_hash": sanitized_hash,
                "policy_version": policy_version,
                "subject_id": subject_id,
            },
        )

    async def add_subjects(self, run_id: str, subjects: Sequence[RunSubject]) -> None:
        self._call(
            "vault.add_subjects",
            {"run_id": run_id, "subjects": [s.model_dump(mode="json") for s in subjects]},
        )


class ProxyLedger:
    def __init__(self, call: Call) -> None:
        self._call = call
        self.vault = ProxyVault(call)

    async def create_run(self, run: RunRecord) -> None:
        raise SandboxViolationError("a sandboxed step never creates runs")

    async def get_run(self, run_id: str) -> RunRecord:
        return codec.load_model(self._call("ledger.get_run", {"run_id": run_id}))

    async def finish_run(self, run_id: str, status: RunStatus, outcome: Any = None) -> RunRecord:
        answer = self._call(
            "ledger.finish_run", {"run_id": run_id, "status": status.value, "outcome": outcome}
        )
        return codec.load_model(answer)

    async def append(
        self, run_id: str, event: NewEvent, *, expected_sequence: int | None = None
    ) -> ExecutionEvent:
        return (await self.append_many(run_id, [event], expected_sequence=expected_sequence))[0]

    async def append_many(
        self, run_id: str, events: Sequence[NewEvent], *, expected_sequence: int | None = None
    ) -> list[ExecutionEvent]:
        answer = self._call(
            "ledger.append_many",
            {
                "run_id": run_id,
                "events": [codec.dump_new_event(e) for e in events],
                "expected_sequence": expected_sequence,
            },
        )
        return [ExecutionEvent.model_validate(e) for e in answer]

    async def events(self, run_id: str, *, from_sequence: int = 1) -> list[ExecutionEvent]:
        answer = self._call("ledger.events", {"run_id": run_id, "from_sequence": from_sequence})
        return [ExecutionEvent.model_validate(e) for e in answer]

    async def payload(self, event: ExecutionEvent) -> bytes:
        return (
            codec.unb64(self._call("ledger.payload", {"event": event.model_dump(mode="json")}))
            or b""
        )

    async def events_with_payloads(
        self,
        run_id: str,
        *,
        types: frozenset[ExecutionEventType] | None = None,
        missing_ok: bool = False,
    ) -> list[tuple[ExecutionEvent, bytes | None]]:
        answer = self._call(
            "ledger.events_with_payloads",
            {
                "run_id": run_id,
                "types": sorted(t.value for t in types) if types is not None else None,
                "missing_ok": missing_ok,
            },
        )
        return [(ExecutionEvent.model_validate(e), codec.unb64(d)) for e, d in answer]

    async def verify(self, run_id: str, *, full: bool = True) -> ChainVerification:
        raise SandboxViolationError("chain verification happens before steps, not in them")


class ProxyEvidence:
    def __init__(self, call: Call) -> None:
        self._call = call

    async def records(self, record_type: type[HashedRecord], run_id: str) -> list[Any]:
        answer = self._call("evidence.records", {"type": record_type.__name__, "run_id": run_id})
        return [codec.load_model(r) for r in answer]

    async def record(self, record_type: type[HashedRecord], key: str) -> Any:
        return codec.load_model(
            self._call("evidence.record", {"type": record_type.__name__, "key": key})
        )


class ProxyArtifacts:
    """Content-addressed artifacts over the pipe. What this process stored itself (a step's
    checkpointed state and random state, read back by the next step) is kept in a small
    cache: a digest names its bytes, so the cache cannot answer differently from the store.

    With ``unsent`` (the child's outgoing puts), a put costs no message of its own: the digest
    is computed here and the bytes ride on the next call's frame (a step's append), which the
    broker stores before it serves that call — so an artifact is stored before any event that
    names it. The broker refuses such a put if its stored form would differ (sanitizing)."""

    location = "sandbox-broker"
    #: bytes of recently stored artifacts kept for the next step's reads
    CACHE_BYTES = 16 * 1024**2

    def __init__(self, call: Call, unsent: list[dict[str, Any]] | None = None) -> None:
        self._call = call
        self._unsent = unsent
        self._recent: OrderedDict[str, bytes] = OrderedDict()
        self._recent_bytes = 0

    async def put(self, data: bytes) -> str:
        if self._unsent is not None:
            digest = sha256_digest(data)
            self._unsent.append({"data": codec.b64(data), "digest": digest})
        else:
            digest = str(self._call("artifacts.put", {"data": codec.b64(data)}))
        if digest not in self._recent and len(data) <= self.CACHE_BYTES // 4:
            self._recent[digest] = data
            self._recent_bytes += len(data)
            while self._recent_bytes > self.CACHE_BYTES:
                self._recent_bytes -= len(self._recent.popitem(last=False)[1])
        return digest

    async def get(self, digest: str) -> bytes:
        if digest in self._recent:
            return self._recent[digest]
        return codec.unb64(self._call("artifacts.get", {"digest": digest})) or b""

    async def exists(self, digest: str) -> bool:
        if digest in self._recent:  # put here (carried or answered): stored or about to be
            return True
        return bool(self._call("artifacts.exists", {"digest": digest}))

    async def delete(self, digest: str) -> None:
        raise SandboxViolationError("a sandboxed step never deletes evidence")

    async def set_legal_hold(self, digest: str, on: bool) -> None:
        raise SandboxViolationError("a sandboxed step never changes legal holds")

    async def legal_hold(self, digest: str) -> bool:
        raise SandboxViolationError("legal holds are not served to sandboxed steps")

    async def set_retention(self, digest: str, until: Any) -> None:
        raise SandboxViolationError("a sandboxed step never changes retention")

    async def retention(self, digest: str) -> Any:
        raise SandboxViolationError("retention is not served to sandboxed steps")

    def enforced_by_backend(self) -> bool:
        return False


class ProxyModel:
    """A catalog model whose calls go through the worker's configured provider."""

    def __init__(
        self,
        call: Call,
        graph_id: str,
        name: str,
        profile: str,
        price_per_1k_tokens: Decimal | None = None,
        wire: Mapping[str, str] | None = None,
    ) -> None:
        self._call, self.graph_id, self.name, self.profile = call, graph_id, name, profile
        #: the worker's model price, so a call's worst case is refused here before it is made
        self.price_per_1k_tokens = price_per_1k_tokens
        #: the worker's provider's model id and ``tool_calling`` (an OpenAI-compatible
        #: endpoint), so the body it sends is recorded here as sent; None: no such body
        self.wire = dict(wire) if wire is not None else None

    def compile(self, request: ModelRequest) -> tuple[dict[str, Any], bool]:
        """The body the worker's provider sends for ``request`` (``runtime.providers.wire``),
        and whether its tools are offered in the prompt (not prompted: nothing to record)."""
        if self.wire is None:
            return {}, False
        return request_body(
            request,
            model=self.wire["model_id"],
            tool_calling="prompt" if self.wire["tool_calling"] == "prompt" else "native",
        )

    async def complete(self, request: ModelRequest) -> ModelResponse:
        answer = self._call(
            "model.complete",
            {
                "graph_id": self.graph_id,
                "model": self.name,
                "request": request.model_dump(mode="json"),
            },
        )
        return ModelResponse.model_validate(answer)


def _read_tool(call: Call, graph_id: str, capability_id: str) -> ToolProvider:
    async def provider(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
        return call(
            "tool.read",
            {
                "graph_id": graph_id,
                "capability_id": capability_id,
                "arguments": arguments,
                "context": codec.dump_context(context),
            },
        )

    return provider


def brokered_catalog(
    catalog: AgentCatalog,
    call: Call,
    worker_models: Mapping[str, Mapping[str, str]] | None = None,
) -> AgentCatalog:
    """The catalog with its models and READ providers replaced by broker calls: graph code,
    prompts and policies run here, anything that would reach out goes through the worker.
    ``worker_models`` (name → ``{"profile", "model_id", "tool_calling"}``, the last two for an
    OpenAI-compatible endpoint): the worker's models of this graph, which include the
    configured ones this process cannot know (it has no settings)."""
    described: dict[str, Mapping[str, str]] = {
        name: {"profile": model.profile} for name, model in catalog.models.items()
    }
    described |= dict(worker_models or {})
    models = {
        name: ProxyModel(
            call,
            catalog.graph_id,
            name,
            str(about["profile"]),
            model_price(catalog.models[name]) if name in catalog.models else None,
            about if "model_id" in about else None,
        )
        for name, about in described.items()
    }
    readable = [c.capability_id for c in catalog.capabilities if not c.is_write]
    readable += [t for t in catalog.live_read_tools if t not in readable]  # checked by the guard

    async def read_providers() -> Mapping[str, ToolProvider]:
        return {c: _read_tool(call, catalog.graph_id, c) for c in readable}

    return dataclasses.replace(catalog, models=models, read_providers=read_providers)
