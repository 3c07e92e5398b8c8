"""OpenTelemetry GenAI spans → ingested tool-loop runs, one per trace.

Spans are ordered by trace structure (parents before children, siblings by start time): the
ledger is ordered by sequence, never by timestamps. ``gen_ai`` model spans become model calls
(input and output messages, usage, model), tool spans tool calls (name, arguments, result),
the root agent invocation the run itself. A span that cannot be interpreted is kept as an
OPAQUE event and reported, never dropped.

Frameworks differ: operation names (``call_llm``/``chat``/``text_completion``…, or only the
span name), ``gen_ai.*`` or ``genai.*`` keys, outputs as a text, a list of ``{tool.name,
tool.args}``, an OpenAI or LlamaIndex message, or semantic-convention message parts; tool
arguments as a JSON text or an object; tool-call ids present or not. Each is read here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest.import_common import (
    ConvertedRun,
    ImportReport,
    build,
    content_id,
    read_json_file,
    record_converted,
)
from ingest.terminators import ending_terminators, is_terminator
from models.capability import side_effect_class_from_hints
from models.errors import InvalidInputError
from models.ingest import IngestEventBatch, IngestRunHeader
from runtime.ports import ArtifactStore, EvidenceReader, IngestLedger
from runtime.tool_loop.conversation import parse_arguments

MODEL_OPS = {"call_llm", "chat", "text_completion", "generate_content", "completion", "llm"}
TOOL_OPS = {"execute_tool", "tool"}
AGENT_OPS = {"invoke_agent", "create_agent", "agent"}


def _attr(attrs: dict[str, Any], *names: str) -> Any:
    for name in names:
        for key in (name, name.replace("gen_ai.", "genai.", 1)):
            if key in attrs and attrs[key] is not None:
                return attrs[key]
    return None


def _otlp_value(value: dict[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def _spans(data: Any, path: Path) -> list[dict[str, Any]]:
    """Spans as ``{name, span_id, parent_id, trace_id, start, end, status, attributes, where}``."""
    if isinstance(data, dict) and "resourceSpans" in data:  # OTLP JSON
        raw = [
            (f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]", s, True)
            for i, rs in enumerate(data["resourceSpans"])
            for j, ss in enumerate(rs.get("scopeSpans", []))
            for k, s in enumerate(ss.get("spans", []))
        ]
    else:
        items = data.get("spans") if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise InvalidInputError(
                f'{path}: expected {{"spans": [...]}}, a list of spans or OTLP JSON'
            )
        raw = [(f"spans[{i}]", s, False) for i, s in enumerate(items)]
    spans = []
    for where, span, otlp in raw:
        if not isinstance(span, dict) or not isinstance(span.get("name"), str):
            raise InvalidInputError(f"{path}: {where}: expected a span with a name")
        try:
            if otlp:
                attrs = {
                    a["key"]: _otlp_value(a.get("value", {})) for a in span.get("attributes", [])
                }
                ids = (span.get("spanId"), span.get("parentSpanId") or None, span.get("traceId"))
                start, end = int(span["startTimeUnixNano"]), int(span.get("endTimeUnixNano") or 0)
                status = (span.get("status") or {}).get("code")
            else:
                context, parent = span.get("context") or {}, span.get("parent") or {}
                attrs = dict(span.get("attributes") or {})
                ids = (context.get("span_id"), parent.get("span_id"), context.get("trace_id"))
                start, end = int(span["start_time"]), int(span.get("end_time") or 0)
                status = (span.get("status") or {}).get("status_code")
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"{path}: {where}: missing or invalid {exc}") from None
        if ids[0] is None:
            raise InvalidInputError(f"{path}: {where}: no span id")
        spans.append(
            {
                "name": span["name"],
                "span_id": ids[0],
                "parent_id": ids[1],
                "trace_id": ids[2],
                "start": start,
                "end": end,
                "status": str(status or "").lower(),
                "attributes": attrs,
                "where": where,
            }
        )
    return spans


def _ordered(spans: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[int]]:
    """Parents before children, siblings by start time (then end time, then position); then
    the spans no root leads to (their parents form a cycle), by start time, and their ``id``s
    (kept and reported as opaque, never dropped)."""
    by_id = {s["span_id"]: s for s in spans}
    children: dict[Any, list[dict[str, Any]]] = {}
    roots: list[dict[str, Any]] = []
    for s in spans:
        (children.setdefault(s["parent_id"], []) if s["parent_id"] in by_id else roots).append(s)
    out: list[dict[str, Any]] = []

    def key(s: dict[str, Any]) -> tuple[int, int]:
        return s["start"], s["end"]

    def walk(nodes: Iterable[dict[str, Any]]) -> None:
        for node in sorted(nodes, key=key):
            out.append(node)
            walk(children.get(node["span_id"], []))

    walk(roots)
    cyclic: set[int] = set()
    if len(out) < len(spans):
        reached = {id(s) for s in out}
        cycle = sorted((s for s in spans if id(s) not in reached), key=key)
        cyclic = {id(s) for s in cycle}
        out += cycle
    return out, cyclic


def _operation(span: dict[str, Any]) -> str:
    op = _attr(span["attributes"], "gen_ai.operation.name")
    return str(op or span["name"].split(" ", 1)[0]).lower()


def _count(attrs: Any, *names: str) -> int:
    """A token count attribute as a whole number; anything else is refused naming it."""
    value = _attr(attrs, *names) or 0
    try:
        count = int(value) if not isinstance(value, float) or value.is_integer() else None
    except (TypeError, ValueError, OverflowError):
        count = None
    if count is None or isinstance(value, bool) or count < 0:
        raise InvalidInputError(f"{names[0]}: {value!r} is not a whole number of tokens")
    return count


def _json(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def _output(attrs: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    """A model span's answer: (text, tool calls as {id, name, arguments})."""
    raw = _attr(attrs, "gen_ai.output", "gen_ai.output.messages", "gen_ai.completion")
    value = _json(raw)
    calls: list[dict[str, Any]] = []
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        if all("tool.name" in v for v in value):
            calls = [{"name": v["tool.name"], "arguments": v.get("tool.args")} for v in value]
            return None, calls
        texts = []
        for message in value:  # semantic-convention messages with parts
            for part in message.get("parts") or ():
                if part.get("type") == "tool_call":
                    calls.append(
                        {
                            "id": part.get("id"),
                            "name": part.get("name"),
                            "arguments": part.get("arguments"),
                        }
                    )
                elif part.get("type") == "text":
                    texts.append(part.get("content") or "")
            if isinstance(message.get("content"), str):
                texts.append(message["content"])
        return ("".join(texts) or None), calls
    if isinstance(value, dict) and (
        "tool_calls" in value or "additional_kwargs" in value or "blocks" in value
    ):
        wire = (
            value.get("tool_calls")
            or (value.get("additional_kwargs") or {}).get("tool_calls")
            or ()
        )
        for call in wire:
            function = call.get("function") or call
            calls.append(
                {
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        text = value.get("content")
        if text is None and value.get("blocks"):
            text = "".join(b.get("text") or "" for b in value["blocks"] if isinstance(b, dict))
        return (text or None), calls
    if raw is None:
        return None, []
    return (raw if isinstance(raw, str) else json.dumps(raw)), []


def _messages(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    value = _json(_attr(attrs, "gen_ai.input.messages", "gen_ai.prompt"))
    if not isinstance(value, list):
        return []
    out = []
    for m in value:
        if isinstance(m, dict) and isinstance(m.get("role"), str):
            content = m.get("content")
            if not isinstance(content, str) and m.get("parts"):
                content = "".join(
                    p.get("content") or "" for p in m["parts"] if p.get("type") == "text"
                )
            out.append(
                {"role": m["role"], "content": content if isinstance(content, str) else None}
            )
    return out


def _unread_messages(attrs: dict[str, Any]) -> str | None:
    """What is wrong with a span's input messages attribute that ``_messages`` cannot read (a
    text that is not JSON, JSON that is not a list), or None."""
    for name in ("gen_ai.input.messages", "gen_ai.prompt"):
        value = _attr(attrs, name)
        if value is None:
            continue
        parsed = _json(value)
        if isinstance(value, str) and parsed is value:
            return f"{name} is not JSON: its messages (the system prompt) were not read"
        if not isinstance(parsed, list):
            return f"{name} is not a list of messages: its messages were not read"
        return None
    return None


def _tool_class(name: str, attrs: dict[str, Any], write_tools: frozenset[str] | None) -> str:
    if is_terminator(name):  # final_answer, final_output, terminate…: never a side effect
        return "READ"
    if write_tools is not None:
        return "WRITE" if name in write_tools else "READ"
    hints = {
        k.rsplit(".", 1)[-1]: v
        for k, v in attrs.items()
        if k.endswith(("readOnlyHint", "destructiveHint"))
    }
    return side_effect_class_from_hints(
        hints.get("readOnlyHint"), hints.get("destructiveHint")
    ).value


@dataclass(frozen=True)
class RunNaming:
    """How a converted trace is named and ended: a file's run is named after its content
    (``otel-<digest>``); a trace received live (``ingest.otlp_receiver``) after its trace id,
    since its content grows while it arrives."""

    run_id: str | None = None
    source: str = "otel"
    labels: Mapping[str, str] = field(default_factory=dict)
    #: the ``run_end`` event's outcome (e.g. ``{"ended_by": "idle_timeout"}``)
    end_outcome: Any = None


def convert_trace(
    spans: list[dict[str, Any]],
    path: Path | str,
    write_tools: frozenset[str] | None,
    naming: RunNaming = RunNaming(),
) -> ConvertedRun:
    """One trace's spans as a run: header and events (see the module docstring)."""
    ordered, cyclic = _ordered(spans)
    # what a model span's tools are looked for in: the spans a root leads to
    reachable = ordered[: len(ordered) - len(cyclic)]
    root = ordered[0]
    events: list[dict[str, Any]] = []
    opaque: list[str] = []
    tools: dict[str, dict[str, Any]] = {}
    first_input: list[dict[str, Any]] | None = None
    model_name = None
    for index, span in enumerate(ordered):
        attrs, op = span["attributes"], _operation(span)
        at = datetime.fromtimestamp(span["start"] / 1e9, UTC).isoformat()
        if id(span) in cyclic:
            opaque.append(f"{path}: {span['where']}: span {span['name']!r} is in a parent cycle")
            events.append(_opaque_event(span, at))
        elif op in MODEL_OPS:
            model_name = str(
                _attr(attrs, "gen_ai.response.model", "gen_ai.request.model")
                or span["name"].split(" ", 1)[-1]
            )
            if first_input is None:
                first_input = _messages(attrs)
                unread = _unread_messages(attrs)
                if unread is not None:  # the system prompt and first messages are not known
                    opaque.append(f"{path}: {span['where']}: {unread}")
                    events.append(
                        {"type": "opaque", "source": "otel", "reason": unread, "data": attrs}
                    )
            _declare_offered_tools(attrs, tools, write_tools)
            events.append(_model_event(reachable, index, at, model_name))
        elif op in TOOL_OPS:
            name = str(_attr(attrs, "gen_ai.tool.name") or span["name"].split(" ", 1)[-1])
            tools.setdefault(name, _tool_declaration(name, attrs, write_tools))
            events.append(_tool_event(span, name, at))
        elif op in AGENT_OPS and span is root:
            continue  # the run itself: its attributes become the run's labels
        else:
            opaque.append(f"{path}: {span['where']}: span {span['name']!r} ({op}) not interpreted")
            events.append(_opaque_event(span, at))
    events.append({"type": "run_end", "outcome": naming.end_outcome})
    for n, event in enumerate(events, start=1):
        event["sequence"] = n
    header = _run_header(
        path, ordered, events, (first_input or [], tools, model_name), write_tools, naming
    )
    batch = build(f"{path}", IngestEventBatch, {"events": events})
    return ConvertedRun(header=header, events=batch.events, opaque=tuple(opaque))


def _tools_run_after(ordered: list[dict[str, Any]], index: int) -> list[dict[str, Any]]:
    """The tool spans after the model span at ``index``, up to the next model span."""
    executed = []
    for later in ordered[index + 1 :]:
        later_op = _operation(later)
        if later_op in MODEL_OPS:
            break
        if later_op in TOOL_OPS:
            executed.append(later)
    return executed


def _model_event(
    ordered: list[dict[str, Any]], index: int, at: str, model_name: str
) -> dict[str, Any]:
    """The model call of the model span at ``index``: its answer, the tool calls it made
    (those that ran after it, when any did), usage and cost."""
    attrs = ordered[index]["attributes"]
    text, calls = _output(attrs)
    executed = _tools_run_after(ordered, index)
    if executed:  # what ran is what the model asked for (some outputs omit it)
        calls = [
            {
                "id": _attr(t["attributes"], "gen_ai.tool.call.id") or f"call-{t['span_id']}",
                "name": _attr(t["attributes"], "gen_ai.tool.name") or t["name"].split(" ", 1)[-1],
                "arguments": _attr(
                    t["attributes"], "gen_ai.tool.args", "gen_ai.tool.call.arguments"
                ),
            }
            for t in executed
        ]
    usage = {
        "prompt_tokens": _count(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        "completion_tokens": _count(
            attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"
        ),
    }
    cost = sum(
        float(_attr(attrs, k) or 0) for k in ("gen_ai.usage.input_cost", "gen_ai.usage.output_cost")
    )
    return {
        "type": "model_call",
        "at": at,
        "model": model_name,
        "content": text,
        "tool_calls": [
            {
                "id": str(c.get("id") or f"call-{index}-{k}"),
                "name": str(c["name"]),
                "arguments": parse_arguments(c.get("arguments")),
            }
            for k, c in enumerate(calls)
        ],
        "usage": usage,
        "cost": f"{cost:.10f}",
    }


def _declare_offered_tools(
    attrs: dict[str, Any], tools: dict[str, dict[str, Any]], write_tools: frozenset[str] | None
) -> None:
    """The tools a model span says were offered (``gen_ai.tool.definitions``, as PydanticAI
    writes them: ``{type, name, description, parameters}`` or OpenAI's ``{type, function}``),
    declared with their parameter schemas: a replay offers the model the same tools."""
    offered = _json(_attr(attrs, "gen_ai.tool.definitions"))
    for item in offered if isinstance(offered, list) else ():
        spec = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            continue
        declared = tools.setdefault(
            spec["name"], _tool_declaration(spec["name"], attrs, write_tools)
        )
        if isinstance(spec.get("description"), str) and not declared["description"]:
            declared["description"] = spec["description"]
        if isinstance(spec.get("parameters"), dict):
            declared.setdefault("parameters", spec["parameters"])


def _tool_declaration(
    name: str, attrs: dict[str, Any], write_tools: frozenset[str] | None
) -> dict[str, Any]:
    """The run header's declaration of tool ``name``: description and side-effect class."""
    return {
        "name": name,
        "description": str(_attr(attrs, "gen_ai.tool.description") or ""),
        "side_effect_class": _tool_class(name, attrs, write_tools),
    }


def _tool_event(span: dict[str, Any], name: str, at: str) -> dict[str, Any]:
    """The tool call of a tool span: id, arguments, output and whether it failed."""
    attrs = span["attributes"]
    output = _attr(attrs, "gen_ai.output", "gen_ai.tool.call.result", "gen_ai.tool.output")
    return {
        "type": "tool_call",
        "at": at,
        "tool_call_id": str(_attr(attrs, "gen_ai.tool.call.id") or f"call-{span['span_id']}"),
        "name": name,
        "arguments": parse_arguments(
            _attr(attrs, "gen_ai.tool.args", "gen_ai.tool.call.arguments")
        ),
        "output": output if isinstance(output, str | type(None)) else json.dumps(output),
        "outcome": "ERROR" if span["status"] == "error" else "SUCCESS",
    }


def _opaque_event(span: dict[str, Any], at: str) -> dict[str, Any]:
    """The OPAQUE event keeping a span that is not interpreted (never dropped)."""
    return {
        "type": "opaque",
        "at": at,
        "source": "otel",
        "reason": f"span {span['name']!r} not interpreted",
        "data": {"name": span["name"], "attributes": span["attributes"]},
    }


def _run_header(
    path: Path | str,
    ordered: list[dict[str, Any]],
    events: list[dict[str, Any]],
    found: tuple[list[dict[str, Any]], dict[str, dict[str, Any]], str | None],
    write_tools: frozenset[str] | None,
    naming: RunNaming,
) -> IngestRunHeader:
    """The run's header: its id (``naming``'s, else the trace's content and the write
    classification), labels, first messages, declared tools and how the tool loop ends.
    ``found`` is the first model input, the tools declared and the model's name."""
    first_input, tools, model_name = found
    root = ordered[0]
    model_events = [e for e in events if e["type"] == "model_call"]
    system = next((m["content"] for m in first_input if m["role"] == "system"), None)
    initial = [m for m in first_input if m["role"] != "system"]
    last_kind = next(
        (e["type"] for e in reversed(events) if e["type"] in ("model_call", "tool_call")), None
    )
    ends_on_tool = last_kind == "tool_call"
    # a terminator ends the loop only where the recorded run ended on it (ingest/terminators)
    terminate = ending_terminators(
        [
            ("tool", e["name"]) if e["type"] == "tool_call" else ("model", "")
            for e in events
            if e["type"] in ("model_call", "tool_call")
        ]
    )
    trace_id = root.get("trace_id")
    return build(
        f"{path}",
        IngestRunHeader,
        {
            # the classification is part of what was imported: another one is another run
            "run_id": naming.run_id
            or "otel-"
            + content_id(
                [{k: v for k, v in s.items() if k != "where"} for s in ordered],
                sorted(write_tools) if write_tools is not None else None,
            ),
            "started_at": datetime.fromtimestamp(root["start"] / 1e9, UTC),
            "labels": {
                **naming.labels,
                "source": naming.source,
                "trace_id": str(trace_id),
                "agent": str(_attr(root["attributes"], "gen_ai.agent.name") or root["name"]),
                **({"model": model_name} if model_name else {}),
            },
            # the model the spans name is the run's model profile (rule 9): an exact replay and
            # an incident call it when the registry knows it (or one of its aliases)
            **({"pinned": {"model_profile": model_name}} if model_name else {}),
            "system_prompt": system,
            "initial_messages": initial,
            "tools": list(tools.values()),
            "user_turns": False,
            "answers_before_end": max(1, sum(1 for e in model_events if not e["tool_calls"])),
            "terminate_tools": list(terminate),
            "max_model_calls": len(model_events)
            if ends_on_tool and not terminate and model_events
            else None,
            "attachments": {"otel": {"trace_id": str(trace_id), "spans": len(ordered)}},
        },
    )


def convert_otel_file(path: Path, write_tools: Iterable[str] | None = None) -> list[ConvertedRun]:
    spans = _spans(read_json_file(path), path)
    if not spans:
        raise InvalidInputError(f"{path}: no spans")
    traces: dict[Any, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    writes = frozenset(write_tools) if write_tools is not None else None
    return [convert_trace(t, path, writes) for t in traces.values()]


async def import_otel(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    path: Path,
    write_tools: Iterable[str] | None = None,
) -> ImportReport:
    runs = convert_otel_file(path, write_tools)
    return await record_converted(ledger, artifacts, evidence, runs, ImportReport(str(path)))
