"""The source run as a sandboxed step reads it: windows of the worker's decoded evidence.

The worker has the source's evidence decoded already (it prepared the replay and checks every
batch against it), so the sandboxed process does not load and decode the whole run again: it
asks for the header once, then for the recorded items its steps read, a window at a time
from the position asked (a replay that follows its source finds its next answers in the
window it already has). What it keeps is bounded by the window sizes, whatever the run's
length. Every answer is a pure function of the immutable source run, so a cached answer is
the one the worker would give again.

``BrokeredSource`` is the child's side (``ReplaySource`` over the pipe); ``SourceServer`` the
worker's, serving only the replay's own source run.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any

from activities.sandbox import codec
from activities.sandbox.guard import Refused
from models import (
    ApprovalRecord,
    PromptArtifact,
    RetrievalFixture,
    RunRecord,
    SideEffectRecord,
    ToolFixture,
)
from models.model_call import ModelResponse
from runtime.replay.engine import ReplayEngine
from runtime.replay.source import ForkPoint, ReplaySource, SourceEvidence
from runtime.tools import ToolCallContext

Call = Callable[[str, dict[str, Any]], Any]
#: recorded items sent per window (model responses, prompts, clock readings, fixtures)
WINDOW = 64
#: fixtures and retrievals the child keeps (a few windows: a replay reads them in order)
KEPT_FIXTURES = 4 * WINDOW
_STREAMS = ("model_responses", "model_prompts", "clock_reads")
_LOOKUPS = ("approval", "side_effect", "provider_fixture")


class BrokeredSource:
    """``ReplaySource`` for a sandboxed step: the header held, everything else asked for."""

    def __init__(self, call: Call, run_id: str) -> None:
        self._call = call
        self.run_id = run_id
        header = call("source.header", {"run_id": run_id})
        self.run: RunRecord = codec.load_model(header["run"])
        self.agent_input: Any = header["agent_input"]
        self.seed = int(header["seed"])
        self.start_time = datetime.fromisoformat(header["start_time"])
        self._counts = {
            "model_responses": int(header["model_calls"]),
            "model_prompts": int(header["model_calls"]),
            "clock_reads": int(header["clock_reads"]),
        }
        #: per stream, the last window asked for: (its first index, its items)
        self._windows: dict[str, tuple[int, list[Any]]] = {}
        self._fixtures: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
        self._lookups: dict[tuple[str, str | None], Any] = {}
        self._forks: dict[str, ForkPoint | None] = {}

    def _item(self, stream: str, index: int) -> Any:
        if not 0 <= index < self._counts[stream]:
            return None
        start, items = self._windows.get(stream, (0, []))
        if not start <= index < start + len(items):
            answer = self._call(
                "source.items", {"run_id": self.run_id, "stream": stream, "start": index}
            )
            start, items = index, [_parse(stream, item) for item in answer]
            self._windows[stream] = (start, items)
        return items[index - start] if index - start < len(items) else None

    def model_call_count(self) -> int:
        return self._counts["model_responses"]

    def model_response(self, index: int) -> ModelResponse | None:
        response: ModelResponse | None = self._item("model_responses", index)
        return response

    def model_prompt(self, index: int) -> PromptArtifact | None:
        prompt: PromptArtifact | None = self._item("model_prompts", index)
        return prompt

    def clock_at(self, index: int) -> datetime:
        count = self._counts["clock_reads"]
        if not count:
            return self.start_time
        value: datetime = self._item("clock_reads", min(max(index, 0), count - 1))
        return value

    def _recorded(self, kind: str, key: str, used: int) -> Any:
        wanted = (kind, key, used)
        if wanted not in self._fixtures:
            answer = self._call(
                "source.fixtures", {"run_id": self.run_id, "kind": kind, "key": key, "used": used}
            )
            self._fixtures[wanted] = None  # not recorded, unless the window has it
            parse = ToolFixture if kind == "tool" else RetrievalFixture
            for other, repeat, data in answer:
                self._fixtures[(kind, str(other), int(repeat))] = parse.model_validate(data)
            while len(self._fixtures) > KEPT_FIXTURES:
                self._fixtures.popitem(last=False)
        self._fixtures.move_to_end(wanted)
        return self._fixtures[wanted]

    def fixture(self, request_hash: str, used: int) -> ToolFixture | None:
        fixture: ToolFixture | None = self._recorded("tool", request_hash, used)
        return fixture

    def retrieval(self, query_hash: str, used: int) -> RetrievalFixture | None:
        fixture: RetrievalFixture | None = self._recorded("retrieval", query_hash, used)
        return fixture

    def _lookup(self, kind: str, key: str | None) -> Any:
        if (kind, key) not in self._lookups:
            answer = self._call("source.lookup", {"run_id": self.run_id, "kind": kind, "key": key})
            self._lookups[(kind, key)] = None if answer is None else codec.load_model(answer)
        return self._lookups[(kind, key)]

    def approval(self, action_hash: str) -> ApprovalRecord | None:
        record: ApprovalRecord | None = self._lookup("approval", action_hash)
        return record

    def side_effect(self, action_hash: str) -> SideEffectRecord | None:
        record: SideEffectRecord | None = self._lookup("side_effect", action_hash)
        return record

    def provider_fixture(self, provider_request_id: str | None) -> ToolFixture | None:
        record: ToolFixture | None = self._lookup("provider_fixture", provider_request_id)
        return record

    def fork_point(self, step_id: str) -> ForkPoint | None:
        if step_id not in self._forks:
            answer = self._call("source.fork", {"run_id": self.run_id, "step_id": step_id})
            self._forks[step_id] = (
                None
                if answer is None
                else ForkPoint(
                    {str(k): int(v) for k, v in dict(answer["fixtures"]).items()},
                    {str(k): int(v) for k, v in dict(answer["retrievals"]).items()},
                    answer["state_schema_version"],
                )
            )
        return self._forks[step_id]


def _parse(stream: str, item: Any) -> Any:
    if item is None:
        return None
    if stream == "model_responses":
        return ModelResponse.model_validate(item)
    if stream == "model_prompts":
        return codec.load_model(item)
    return datetime.fromisoformat(item)


class BrokeredEngine(ReplayEngine):
    """The sandboxed process's engine: its steps read the source through ``BrokeredSource``
    (one per source run, kept between jobs: it holds windows, not the run)."""

    #: sources kept between jobs (a process serves one replay, so one source in practice)
    KEPT_SOURCES = 2

    def __init__(self, *args: Any, call: Call, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._call = call
        self._brokered: OrderedDict[str, BrokeredSource] = OrderedDict()

    async def live_read_time(
        self, graph_id: str, tool: str, arguments: dict[str, Any], context: ToolCallContext
    ) -> datetime:
        """A team's READ tool runs here, in the sandbox, only once the worker's guard allowed
        the call, at the logical time the guard gives (one the source recorded)."""
        answer = self._call(
            "tool.allow",
            {
                "graph_id": graph_id,
                "capability_id": tool,
                "arguments": arguments,
                "context": codec.dump_context(context),
            },
        )
        return datetime.fromisoformat(str(answer))

    async def step_source(self, run_id: str) -> ReplaySource:
        source = self._brokered.pop(run_id, None) or BrokeredSource(self._call, run_id)
        self._brokered[run_id] = source
        while len(self._brokered) > self.KEPT_SOURCES:
            self._brokered.popitem(last=False)
        return source


class SourceServer:
    """The worker's side: answers from the engine's decoded evidence of ``source_run_id``."""

    def __init__(self, engine: ReplayEngine, source_run_id: str) -> None:
        self.engine = engine
        self.source_run_id = source_run_id

    async def source(self, p: dict[str, Any]) -> SourceEvidence:
        if p["run_id"] != self.source_run_id:
            raise Refused("source", f"the source of run {p['run_id']!r} (only the replay's own)")
        return await self.engine.source(self.source_run_id)

    async def header(self, p: dict[str, Any]) -> Any:
        source = await self.source(p)
        return {
            "run": codec.dump_model(source.run),
            "agent_input": source.agent_input,
            "seed": source.seed,
            "start_time": source.start_time.isoformat(),
            "model_calls": len(source.model_responses),
            "clock_reads": len(source.clock_reads),
        }

    async def items(self, p: dict[str, Any]) -> Any:
        source = await self.source(p)
        stream, start = str(p["stream"]), int(p["start"])
        if stream not in _STREAMS or start < 0:
            raise ValueError(f"no stream {stream!r} from {start}")
        window = getattr(source, stream)[start : start + WINDOW]
        if stream == "model_responses":
            return [r.model_dump(mode="json") for r in window]
        if stream == "model_prompts":
            return [None if a is None else codec.dump_model(a) for a in window]
        return [t.isoformat() for t in window]

    async def fixtures(self, p: dict[str, Any]) -> Any:
        source = await self.source(p)
        kind, key, used = str(p["kind"]), str(p["key"]), int(p["used"])
        if kind == "tool":
            found: list[tuple[str, int, Any]] = source.tool_fixtures_from(key, used, WINDOW)
        elif kind == "retrieval":
            found = source.retrievals_from(key, used, WINDOW)
        else:
            raise ValueError(f"no fixtures of kind {kind!r}")
        return [[k, repeat, f.model_dump(mode="json")] for k, repeat, f in found]

    async def lookup(self, p: dict[str, Any]) -> Any:
        source = await self.source(p)
        kind, key = str(p["kind"]), p.get("key")
        if kind not in _LOOKUPS:
            raise ValueError(f"no lookup {kind!r}")
        if kind == "provider_fixture":
            found: Any = source.provider_fixture(None if key is None else str(key))
        else:
            found = getattr(source, kind)(str(key))
        return None if found is None else codec.dump_model(found)

    async def fork(self, p: dict[str, Any]) -> Any:
        point = (await self.source(p)).fork_point(str(p["step_id"]))
        if point is None:
            return None
        return {
            "fixtures": point.fixtures,
            "retrievals": point.retrievals,
            "state_schema_version": point.state_schema_version,
        }
