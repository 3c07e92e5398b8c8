"""OTLP/HTTP trace exports → spans to stage, and staged spans → the span dicts ``ingest.otel``
converts.

An export arrives as ``ExportTraceServiceRequest`` in protobuf (``application/x-protobuf``)
or in OTLP's JSON mapping (``application/json``: lower camel case keys, trace and span ids in
hex, not base64 as in protobuf's generic JSON), possibly gzip-compressed. Both become the
protobuf message; every span is checked (ids of the right length, a start time) before
anything is stored, so a malformed export is refused whole with the first problem named by
its position (``resourceSpans[0].scopeSpans[1].spans[3].traceId``).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from models.errors import InvalidInputError
from runtime.ports import StagedExport, StoredExport

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: the resource attribute naming the tools that are WRITE (see ``_write_tools``)
WRITE_TOOLS = "replaybook.write_tools"
_STATUS = {Status.STATUS_CODE_OK: "ok", Status.STATUS_CODE_ERROR: "error"}
_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)


def media_type(content_type: str | None) -> str:
    """``application/x-protobuf`` or ``application/json`` (parameters ignored); else refused."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind not in (PROTOBUF, JSON):
        raise InvalidInputError(
            f"content-type {content_type!r} is not {PROTOBUF} or {JSON}", field="content-type"
        )
    return kind


def decompressed(body: bytes, encoding: str | None, limit: int) -> bytes | None:
    """The body without its ``content-encoding`` (gzip or none); None when it inflates to
    more than ``limit`` bytes (inflating stops there: a gzip bomb costs nothing)."""
    encoding = (encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise InvalidInputError(
            f"content-encoding {encoding!r} is not supported (gzip or none)",
            field="content-encoding",
        )
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidInputError(f"not valid gzip: {exc}", field="body") from None
    if len(data) > limit:
        return None
    if not inflater.eof:
        raise InvalidInputError("not valid gzip: the stream is truncated", field="body")
    return data


def parse_export(data: bytes, kind: str) -> ExportTraceServiceRequest:
    """The export message of a protobuf or OTLP/JSON body."""
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(data)
        except DecodeError as exc:
            raise InvalidInputError(
                f"not a protobuf ExportTraceServiceRequest: {exc}", field="body"
            ) from None
        return request
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"invalid JSON: {exc}", field="body") from None
    if not isinstance(document, dict):
        raise InvalidInputError("expected a JSON object with resourceSpans", field="body")
    _ids_to_base64(document)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise InvalidInputError(f"invalid OTLP JSON: {exc}", field="body") from None
    return request


def _ids_to_base64(document: dict[str, Any]) -> None:
    """OTLP/JSON spells ids in hex; protobuf's JSON mapping reads bytes as base64."""
    for i, resource in enumerate(_list(document, "resourceSpans", "")):
        for j, scope in enumerate(_list(resource, "scopeSpans", f"resourceSpans[{i}]")):
            where = f"resourceSpans[{i}].scopeSpans[{j}]"
            for k, span in enumerate(_list(scope, "spans", where)):
                _hex_fields(span, f"{where}.spans[{k}]", ("traceId", "spanId", "parentSpanId"))
                for n, link in enumerate(_list(span, "links", f"{where}.spans[{k}]")):
                    _hex_fields(link, f"{where}.spans[{k}].links[{n}]", ("traceId", "spanId"))


def _list(parent: Any, key: str, where: str) -> list[Any]:
    value = parent.get(key) if isinstance(parent, dict) else None
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInputError(
            f"{where + '.' if where else ''}{key}: expected a list", field="body"
        )
    return value


def _hex_fields(item: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(item, dict):
        raise InvalidInputError(f"{where}: expected an object", field="body")
    for key in keys:
        value = item.get(key)
        if value in (None, ""):
            continue
        try:
            item[key] = base64.b64encode(bytes.fromhex(value)).decode()
        except (TypeError, ValueError):
            raise InvalidInputError(f"{where}.{key}: {value!r} is not hex", field="body") from None


@dataclass(frozen=True)
class StagedSpan:
    """A staged span, decoded for assembly."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    service: str | None
    write_tools: str | None
    span: Span


def staged_export(request: ExportTraceServiceRequest, body: bytes) -> StagedExport:
    """The export to store (``body``: its protobuf encoding), every span checked first: the
    first malformed one is refused by its position. The walk reads the ids and times off the
    protobuf objects and builds nothing per span but its ids (the spans are decoded into
    dicts when their trace is assembled, off the request's path)."""
    spans: dict[str, list[str]] = {}
    rooted: set[str] = set()
    for i, resource in enumerate(request.resource_spans):
        where = f"resourceSpans[{i}]"
        for kv in resource.resource.attributes:
            if kv.key == WRITE_TOOLS:  # checked now: assembly must not find it malformed
                _write_tools(kv.value, f"{where}.resource")
        for j, scope in enumerate(resource.scope_spans):
            for k, span in enumerate(scope.spans):
                trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
                start, end = span.start_time_unix_nano, span.end_time_unix_nano
                if (
                    len(trace_id) != 16
                    or len(span_id) != 8
                    or (parent and len(parent) != 8)
                    or not start
                    or end < start
                    or trace_id == _ZERO_TRACE
                    or span_id == _ZERO_SPAN
                ):
                    _check(span, f"{where}.scopeSpans[{j}].spans[{k}]")
                trace = trace_id.hex()
                ids = spans.get(trace)
                if ids is None:
                    ids = spans[trace] = []
                ids.append(span_id.hex())
                if not parent or parent == _ZERO_SPAN:
                    rooted.add(trace)
    return StagedExport(body=body, spans=spans, rooted=frozenset(rooted))


def _write_tools(value: AnyValue | None, where: str) -> str | None:
    """``replaybook.write_tools`` as a comma-separated text: a string (names separated by
    commas, semicolons or spaces: ``OTEL_RESOURCE_ATTRIBUTES`` cannot hold a comma) or an
    array of strings."""
    if value is None:
        return None
    names = any_value(value)
    if isinstance(names, str):
        names = names.replace(";", " ").replace(",", " ").split()
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InvalidInputError(
            f"{where}: {WRITE_TOOLS} must be tool names (a text or an array of texts)",
            field="body",
        )
    return ",".join(sorted(set(names)))


def _check(span: Span, where: str) -> None:
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16 or not any(trace_id):
        raise InvalidInputError(f"{where}.traceId: expected 16 bytes, not all zero", field="body")
    if len(span_id) != 8 or not any(span_id):
        raise InvalidInputError(f"{where}.spanId: expected 8 bytes, not all zero", field="body")
    if parent and len(parent) != 8:
        raise InvalidInputError(f"{where}.parentSpanId: expected 8 bytes or none", field="body")
    if span.start_time_unix_nano == 0:
        raise InvalidInputError(f"{where}.startTimeUnixNano: missing", field="body")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise InvalidInputError(f"{where}.endTimeUnixNano: before its start", field="body")


def spans_of(trace_id: str, exports: Iterable[StoredExport]) -> list[StagedSpan]:
    """The trace's spans out of the stored exports holding them, each once, in the order
    they arrived; with the ``service.name`` and ``replaybook.write_tools`` of their resource."""
    out: dict[str, StagedSpan] = {}
    wanted_trace = bytes.fromhex(trace_id)
    for export in exports:
        request = ExportTraceServiceRequest.FromString(export.body)
        for resource in request.resource_spans:
            attrs = {a.key: a.value for a in resource.resource.attributes}
            service = attrs["service.name"].string_value[:255] if "service.name" in attrs else None
            writes = _write_tools(attrs.get(WRITE_TOOLS), "resource")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.trace_id != wanted_trace:
                        continue
                    span_id = span.span_id.hex()
                    if span_id in export.span_ids and span_id not in out:
                        parent = span.parent_span_id
                        out[span_id] = StagedSpan(
                            trace_id=trace_id,
                            span_id=span_id,
                            parent_span_id=parent.hex() if any(parent) else None,
                            service=service or None,
                            write_tools=writes,
                            span=span,
                        )
    return list(out.values())


def span_dict(staged: StagedSpan) -> dict[str, Any]:
    """A staged span as ``ingest.otel`` reads spans (ids in hex, times in ns, attributes as
    plain values)."""
    span = staged.span
    return {
        "name": span.name,
        "span_id": staged.span_id,
        "parent_id": staged.parent_span_id,
        "trace_id": staged.trace_id,
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
        "status": _STATUS.get(span.status.code, ""),
        "attributes": {a.key: any_value(a.value) for a in span.attributes},
        "where": f"span {staged.span_id}",
    }


def any_value(value: AnyValue) -> Any:
    """An OTLP ``AnyValue`` as JSON-able Python (bytes as base64 text)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind)


def export_response(kind: str, rejected: int = 0, message: str = "") -> bytes:
    """``ExportTraceServiceResponse`` in the request's encoding; ``partial_success`` when
    spans were rejected (or there is something to warn about)."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if kind == PROTOBUF:
        return response.SerializeToString()
    document = json_format.MessageToDict(response)
    if "partialSuccess" in document and "rejectedSpans" in document["partialSuccess"]:
        # OTLP/JSON writes int64 as a number where protobuf's mapping writes a string
        document["partialSuccess"]["rejectedSpans"] = int(
            document["partialSuccess"]["rejectedSpans"]
        )
    return json.dumps(document).encode()


def status_message(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` (field 1 code, field 2 message) in protobuf, the body OTLP/HTTP
    gives a 4xx/5xx answer to a protobuf request; written out here to avoid a dependency on
    googleapis-common-protos for two fields."""
    text = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(text)) + text


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte = number & 0x7F
        number >>= 7
        if number:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


__all__ = [
    "JSON",
    "PROTOBUF",
    "any_value",
    "decompressed",
    "export_response",
    "media_type",
    "parse_export",
    "span_dict",
    "spans_of",
    "staged_export",
    "status_message",
]
