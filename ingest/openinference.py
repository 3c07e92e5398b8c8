"""OpenInference spans (Arize Phoenix and the OpenInference instrumentations) → the OTel
importer's runs, one per trace.

OpenInference names what a span is with ``openinference.span.kind`` and flattens messages
into indexed attributes: an ``LLM`` span carries ``llm.model_name``,
``llm.input_messages.<i>.message.role|content``, ``llm.output_messages.<i>.message.content``
and ``llm.output_messages.<i>.message.tool_calls.<j>.tool_call.id|function.name|
function.arguments``, and ``llm.token_count.prompt|completion``; a ``TOOL`` span ``tool.name``,
its arguments as ``input.value`` (or ``tool.parameters``) and its result as ``output.value``;
``AGENT`` and ``CHAIN`` spans group the others. Each span is rewritten with the GenAI
attributes ``ingest.otel`` reads (``gen_ai.operation.name``, ``gen_ai.input.messages``,
``gen_ai.output``, ``gen_ai.tool.*``, ``gen_ai.usage.*``) and the trace is converted by it, so
both formats share one conversion (ordering, terminators, side effects, opaque spans).

The outermost span is the run; an inner ``AGENT``/``CHAIN`` span is only grouping: it is left
out and its children hang from its parent. Any other kind (``RETRIEVER``, ``EMBEDDING``,
``RERANKER``, ``GUARDRAIL``, ``EVALUATOR``) is kept as it is and reported as not interpreted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ingest.import_common import ConvertedRun, ImportReport, read_json_file, record_converted
from ingest.otel import _spans, convert_trace
from models.errors import InvalidInputError
from runtime.ports import ArtifactStore, EvidenceReader, IngestLedger

__all__ = ["convert_openinference_file", "import_openinference", "normalised_spans"]

KIND = "openinference.span.kind"
GROUPING = ("AGENT", "CHAIN")


def _indexed(attrs: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.<i>.<rest>`` keys as a list of {rest: value}, by index."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(.+)$")
    items: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        match = pattern.match(key)
        if match:
            items.setdefault(int(match.group(1)), {})[match.group(2)] = value
    return [items[i] for i in sorted(items)]


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {
            "id": c.get("tool_call.id"),
            "function": {
                "name": c.get("tool_call.function.name"),
                "arguments": c.get("tool_call.function.arguments") or "{}",
            },
        }
        for c in _indexed(flat, "message.tool_calls")
    ]
    return {
        "role": flat.get("message.role"),
        "content": flat.get("message.content"),
        **({"tool_calls": calls} if calls else {}),
    }


def _llm(attrs: dict[str, Any]) -> dict[str, Any]:
    inputs = [_message(m) for m in _indexed(attrs, "llm.input_messages")]
    outputs = [_message(m) for m in _indexed(attrs, "llm.output_messages")]
    output = outputs[0] if outputs else {"content": attrs.get("output.value"), "tool_calls": []}
    output.setdefault("tool_calls", [])
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": attrs.get("llm.model_name"),
        "gen_ai.input.messages": json.dumps(
            [{"role": m["role"], "content": m["content"]} for m in inputs]
        ),
        "gen_ai.output": json.dumps(output),
        "gen_ai.usage.input_tokens": attrs.get("llm.token_count.prompt") or 0,
        "gen_ai.usage.output_tokens": attrs.get("llm.token_count.completion") or 0,
    }


def _tool(attrs: dict[str, Any], span_name: str) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": attrs.get("tool.name") or span_name,
        "gen_ai.tool.args": attrs.get("input.value") or attrs.get("tool.parameters") or "{}",
        "gen_ai.output": attrs.get("output.value"),
        **({"gen_ai.tool.call.id": attrs["tool_call.id"]} if attrs.get("tool_call.id") else {}),
    }


def _rewrite(span: dict[str, Any], is_root: bool) -> dict[str, Any] | None:
    """The span with GenAI attributes (None: an inner grouping span, left out)."""
    attrs, kind = span["attributes"], str(span["attributes"].get(KIND) or "").upper()
    if kind == "LLM":
        mapped = _llm(attrs)
    elif kind == "TOOL":
        mapped = _tool(attrs, span["name"])
    elif kind in GROUPING and is_root:
        mapped = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": span["name"]}
    elif kind in GROUPING:
        return None
    else:
        return span
    return {**span, "attributes": {**attrs, **mapped}}


def normalised_spans(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every span rewritten (spans without ``openinference.span.kind`` are kept as they
    are); children of a dropped grouping span hang from its parent. The OTLP receiver runs
    every trace through it, so GenAI and OpenInference traces share one path."""
    by_id = {s["span_id"]: s for s in spans}
    kept: dict[Any, dict[str, Any]] = {}
    for span in spans:
        rewritten = _rewrite(span, span["parent_id"] not in by_id)
        if rewritten is not None:
            kept[span["span_id"]] = rewritten
    out = []
    for span in kept.values():
        parent = span["parent_id"]
        while parent in by_id and parent not in kept:
            parent = by_id[parent]["parent_id"]
        out.append({**span, "parent_id": parent})
    return out


def convert_openinference_file(
    path: Path, write_tools: Iterable[str] | None = None
) -> list[ConvertedRun]:
    """One converted run per trace of an OpenInference export (same containers as OTel)."""
    spans = _spans(read_json_file(path), path)
    if not spans:
        raise InvalidInputError(f"{path}: no spans")
    if not any(KIND in s["attributes"] for s in spans):
        raise InvalidInputError(f"{path}: no span has {KIND}: not OpenInference")
    traces: dict[Any, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["trace_id"], []).append(span)
    writes = frozenset(write_tools) if write_tools is not None else None
    return [convert_trace(normalised_spans(t), path, writes) for t in traces.values()]


async def import_openinference(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    path: Path,
    write_tools: Iterable[str] | None = None,
) -> ImportReport:
    """Import every trace of an OpenInference export."""
    runs = convert_openinference_file(path, write_tools)
    return await record_converted(ledger, artifacts, evidence, runs, ImportReport(str(path)))
