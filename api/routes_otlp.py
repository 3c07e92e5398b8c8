"""``POST /v1/traces``: the OTLP/HTTP trace receiver, so an OpenTelemetry setup only changes
its exporter's endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/v1/traces``,
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN``).

Protobuf or OTLP/JSON, gzip or not; the ingestion role (``engineer`` or ``admin``, as
``POST /api/runs``). The export is stored, one row, before the answer
(``ExportTraceServiceResponse`` in the request's encoding; ``partial_success`` counts the late
spans it refused); its spans are indexed and the runs assembled off the request's path by the
process's ``AssemblyLoop`` (``ingest.otlp_receiver``), which also sweeps idle traces. A malformed export is 400 (a
``google.rpc.Status`` for a protobuf request, the API's error body for JSON), a body over
``REPLAYBOOK_API_MAX_INGEST_BYTES`` (compressed or not) 413; nothing is stored then.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Depends, FastAPI, Request, Response

from api.auth import OPERATE, Principal, require_role
from api.errors import error_body
from api.state import ApiState, State
from ingest.otlp_decode import (
    PROTOBUF,
    decompressed,
    export_response,
    media_type,
    parse_export,
    staged_export,
    status_message,
)
from ingest.otlp_receiver import (
    AssemblyLoop,
    TraceAssembler,
    late_message,
    sweep_interval,
)
from models.errors import InvalidInputError, StoreError

log = structlog.get_logger(__name__)
router = APIRouter(tags=["otlp"])
Ingester = Annotated[Principal, Depends(require_role(*OPERATE))]
#: google.rpc.Code INVALID_ARGUMENT
_INVALID_ARGUMENT = 3

ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Stored (ExportTraceServiceResponse; partial_success names late spans)",
        "content": {PROTOBUF: {}, "application/json": {}},
    },
    400: {"description": "Malformed export (nothing stored), naming the problem"},
    401: {"description": "No or an unknown bearer token"},
    403: {"description": "The token's role may not ingest"},
    413: {"description": "The body (compressed or not) is larger than the ingestion limit"},
    415: {"description": "Neither application/x-protobuf nor application/json"},
    503: {"description": "The store is unavailable; retry after Retry-After seconds"},
}


@router.post(
    "/v1/traces",
    responses=ANSWERS,
    summary="Receive OTLP/HTTP traces (protobuf or JSON, gzip): one run per trace",
    response_class=Response,
)
async def export_traces(request: Request, state: State, caller: Ingester) -> Response:
    try:
        kind = media_type(request.headers.get("content-type"))
    except InvalidInputError as exc:
        return error_body(415, "unsupported_media_type", "content-type", str(exc))
    limit = state.config.max_ingest_bytes
    try:
        data = decompressed(await request.body(), request.headers.get("content-encoding"), limit)
        if data is None:
            return error_body(
                413,
                "payload_too_large",
                "body",
                f"the decompressed body is larger than the limit of {limit} bytes",
            )
        parsed = parse_export(data, kind)
        export = staged_export(parsed, data if kind == PROTOBUF else parsed.SerializeToString())
    except InvalidInputError as exc:
        log.info("otlp export refused", caller=caller.caller, error=str(exc))
        if kind == PROTOBUF:
            body = status_message(_INVALID_ARGUMENT, str(exc))
            return Response(body, status_code=400, media_type=PROTOBUF)
        return error_body(400, "bad_request", exc.field or "body", str(exc))
    stores = await state.stores()
    if stores.otlp_spans is None:
        raise StoreError("the stores have no OTLP staging tables")
    outcome = await stores.otlp_spans.stage(export, datetime.now(UTC))
    assembly_of(request.app).notify(outcome.rooted, stored=outcome.pending > 0)
    log.info(
        "otlp export stored",
        caller=caller.caller,
        spans=sum(len(ids) for ids in export.spans.values()),
        pending=outcome.pending,
        accepted=outcome.accepted,
        duplicates=outcome.duplicates,
        late=outcome.late,
    )
    message = late_message(outcome) if outcome.late else ""
    return Response(export_response(kind, outcome.late, message), media_type=kind)


def assembly_of(app: FastAPI) -> AssemblyLoop:
    """The process's assembly loop (made on first use: an app served without its lifespan,
    as in-process tests do, still assembles)."""
    loop: AssemblyLoop | None = getattr(app.state, "otlp_assembly", None)
    if loop is None:
        api: ApiState = app.state.api
        idle = api.settings.api.otlp_idle_seconds

        async def assembler() -> TraceAssembler:
            stores = await api.stores()
            if stores.otlp_spans is None:
                raise StoreError("the stores have no OTLP staging tables")
            return TraceAssembler(
                stores.otlp_spans, stores.ledger, stores.artifacts, stores.evidence, idle
            )

        loop = app.state.otlp_assembly = AssemblyLoop(assembler, sweep_interval(idle))
    return loop


@contextlib.asynccontextmanager
async def assembly(app: FastAPI) -> AsyncIterator[None]:
    """For the application's lifespan: the assembly loop runs from start-up (so traces left
    idle or half-assembled before a restart are finished) and stops before the stores close."""
    loop = assembly_of(app)
    loop.start()
    try:
        yield
    finally:
        await loop.stop()
