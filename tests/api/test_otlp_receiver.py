"""``POST /v1/traces`` with the real OTLP/HTTP exporter, against the API served by uvicorn over
SQLite and PostgreSQL: out-of-order, duplicated and split exports make one intact run; JSON
and gzip; late spans refused as a partial success; 400/413 with nothing stored; an idle trace
finished by the sweep; unknown spans kept as OPAQUE and counted."""

from __future__ import annotations

import asyncio
import gzip
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from stores.sql.database import Database, open_database
from stores.sql.otlp_spans import SqlOtlpSpans
from tests.api.otlp_support import (
    ENGINEER,
    MAX_INGEST_BYTES,
    VIEWER,
    finished_spans,
    genai_agent,
    openinference_agent,
    served_api,
    trace_id_of,
    wait_for_run,
    write_trace_pb,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")
PROTOBUF_TYPE = "application/x-protobuf"
PROTOBUF = {"content-type": PROTOBUF_TYPE, **ENGINEER}
ENGINEER_HEADER = "Authorization: " + ENGINEER["Authorization"]


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["sqlite", "postgresql"])
async def receiver(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_url: str,
    postgres_url: str,
) -> AsyncIterator[tuple[str, SqlOtlpSpans]]:
    """The served API's URL and a view of its staging tables."""
    url = sqlite_url if request.param == "sqlite" else postgres_url
    db: Database = await open_database(url)
    try:
        with served_api(tmp_path_factory.mktemp(f"otlp-{request.param}"), url) as base:
            yield base, SqlOtlpSpans(db)
    finally:
        await db.dispose()


def exporter(base: str, **options: Any) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=f"{base}/v1/traces", headers=ENGINEER, **options)


async def export(base: str, spans: list[ReadableSpan], **options: Any) -> SpanExportResult:
    """One export by the real exporter (blocking HTTP, so in a thread)."""
    return await asyncio.to_thread(exporter(base, **options).export, spans)


def client(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=30)


async def run_of(base: str, run_id: str) -> dict[str, Any]:
    with client(base) as http:
        return await asyncio.to_thread(wait_for_run, http, run_id)


def kinds(run: dict[str, Any]) -> list[str]:
    return [e["type"] for e in run["events"]]


async def test_split_out_of_order_duplicated_exports_make_one_intact_run(
    receiver: tuple[str, SqlOtlpSpans],
) -> None:
    base, store = receiver
    chat1, tool, chat2, root = finished_spans(genai_agent)
    # children in another order than they ended, split over three exports, twice each,
    # gzip on one exporter and not on the other; the root comes last, as it ends last
    gz = {"compression": Compression.Gzip}
    assert await export(base, [chat2, tool], **gz) is SpanExportResult.SUCCESS
    assert await export(base, [tool, chat1]) is SpanExportResult.SUCCESS
    assert await export(base, [chat1, chat2, root], **gz) is SpanExportResult.SUCCESS
    run_id = f"otlp-{trace_id_of([root])}"
    run = await run_of(base, run_id)
    assert run["status"] == "COMPLETED"
    assert run["labels"]["ended_by"] == "root_span" and run["labels"]["agent"] == "support"
    assert kinds(run).count("MODEL_CALL") == 2 and kinds(run).count("TOOL_CALL") == 1
    stored = await store.exports(trace_id_of([root]))
    assert sorted(i for e in stored for i in e.span_ids) == sorted(
        format(s.context.span_id, "016x") for s in (chat1, tool, chat2, root)
    ), "every span stored, the duplicates of the second export once"
    # every span again after the run is written: duplicates, nothing stored, nothing added
    assert await export(base, [root, chat1, tool, chat2]) is SpanExportResult.SUCCESS
    assert await store.exports(trace_id_of([root])) == stored
    with client(base) as http:
        again = http.get(f"/api/runs/{run_id}", headers=VIEWER).json()
        verified = http.get(f"/api/runs/{run_id}/verify", headers=VIEWER).json()
        listed = http.get("/api/runs", headers=VIEWER).json()["runs"]
    assert again["event_count"] == run["event_count"]
    assert verified["intact"] is True, verified
    assert run_id in [r["run_id"] for r in listed]


async def test_a_late_span_is_kept_and_refused_as_a_partial_success(
    receiver: tuple[str, SqlOtlpSpans],
) -> None:
    base, store = receiver
    *children, root = finished_spans(lambda t: genai_agent(t, unknown=True))
    late, children = children[-1], children[:-1]  # the db.query span, sent after the root
    body = encode_spans([*children, root]).SerializeToString()
    with client(base) as http:
        assert http.post("/v1/traces", content=body, headers=PROTOBUF).status_code == 200
    run_id = f"otlp-{trace_id_of([root])}"
    await run_of(base, run_id)
    with client(base) as http:
        answer = http.post(
            "/v1/traces", content=encode_spans([late]).SerializeToString(), headers=PROTOBUF
        )
    assert answer.status_code == 200 and answer.headers["content-type"] == PROTOBUF_TYPE
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and run_id in partial.error_message
    state = await store.state(trace_id_of([root]))
    assert state is not None and state["run_id"] == run_id and state["state"] == "assembled"


async def test_json_and_gzip_bodies(receiver: tuple[str, SqlOtlpSpans]) -> None:
    base, _ = receiver
    spans = finished_spans(openinference_agent)
    document = json.loads(_otlp_json(spans))
    with client(base) as http:
        answer = http.post(
            "/v1/traces",
            content=gzip.compress(json.dumps(document).encode()),
            headers={"content-type": "application/json", "content-encoding": "gzip", **ENGINEER},
        )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json" and answer.json() == {}
    run = await run_of(base, f"otlp-{trace_id_of(spans)}")
    assert kinds(run).count("MODEL_CALL") == 2 and kinds(run).count("TOOL_CALL") == 1
    assert run["labels"]["agent"] == "LangGraph"


def _otlp_json(spans: list[ReadableSpan]) -> str:
    """OTLP/JSON as the spec spells it: hex ids (protobuf's JSON mapping would write base64)."""
    from google.protobuf import json_format

    document = json_format.MessageToDict(encode_spans(spans))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = __import__("base64").b64decode(span[key]).hex()
    return json.dumps(document)


async def test_malformed_and_too_large_exports_store_nothing(
    receiver: tuple[str, SqlOtlpSpans],
) -> None:
    base, store = receiver
    spans = finished_spans(genai_agent)
    good = json.loads(_otlp_json(spans))
    bad = json.loads(_otlp_json(spans))
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "zz"
    json_headers = {"content-type": "application/json", **ENGINEER}
    with client(base) as http:
        refused = http.post("/v1/traces", content=json.dumps(bad), headers=json_headers)
        garbage = http.post("/v1/traces", content=b"\xff\x00garbage", headers=PROTOBUF)
        bomb = http.post(
            "/v1/traces",
            content=gzip.compress(b" " * (MAX_INGEST_BYTES + 1)),
            headers={"content-encoding": "gzip", **json_headers},
        )
        big = http.post("/v1/traces", content=b"0" * (MAX_INGEST_BYTES + 1), headers=PROTOBUF)
        text = http.post(
            "/v1/traces", content=b"{}", headers={"content-type": "text/plain", **ENGINEER}
        )
        viewer = http.post(
            "/v1/traces", content=json.dumps(good), headers={**json_headers, **VIEWER}
        )
    assert refused.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans[1].spanId" in refused.json()["message"]
    assert garbage.status_code == 400 and garbage.headers["content-type"] == PROTOBUF_TYPE
    assert b"ExportTraceServiceRequest" in garbage.content
    assert bomb.status_code == 413 and "decompressed" in bomb.json()["message"]
    assert big.status_code == 413
    assert text.status_code == 415 and text.json()["field"] == "content-type"
    assert viewer.status_code == 403
    assert await store.state(trace_id_of(spans)) is None  # not one span of it was stored


async def test_a_trace_whose_root_never_ends_is_finished_by_the_idle_sweep(
    receiver: tuple[str, SqlOtlpSpans],
) -> None:
    base, _ = receiver
    spans = finished_spans(lambda t: genai_agent(t, end_root=False))
    assert await export(base, spans) is SpanExportResult.SUCCESS
    run = await run_of(base, f"otlp-{trace_id_of(spans)}")
    assert run["labels"]["ended_by"] == "idle_timeout"
    assert kinds(run).count("MODEL_CALL") == 2
    with client(base) as http:
        verified = http.get(f"/api/runs/{run['run_id']}/verify", headers=VIEWER).json()
    assert verified["intact"] is True


async def test_unknown_spans_are_kept_as_opaque_events_and_counted(
    receiver: tuple[str, SqlOtlpSpans],
) -> None:
    base, _ = receiver
    spans = finished_spans(lambda t: genai_agent(t, unknown=True))
    with client(base) as http:
        before = _opaque_count(http.get("/metrics").text)
    assert await export(base, spans) is SpanExportResult.SUCCESS
    run = await run_of(base, f"otlp-{trace_id_of(spans)}")
    assert "OPAQUE" in kinds(run)
    with client(base) as http:
        assert _opaque_count(http.get("/metrics").text) == before + 1


def _opaque_count(metrics: str) -> float:
    line = next(
        (x for x in metrics.splitlines() if x.startswith("replaybook_otlp_opaque_spans_total")),
        "x 0",
    )
    return float(line.split()[-1])


async def test_curl_posts_a_trace_pb_and_the_run_is_listed(
    receiver: tuple[str, SqlOtlpSpans], tmp_path: Path
) -> None:
    """The acceptance: ``curl -X POST $API/v1/traces -H 'content-type:
    application/x-protobuf' --data-binary @trace.pb`` with a token → 200, the run listed."""
    base, _ = receiver
    run_id = write_trace_pb(tmp_path / "trace.pb")
    command = [
        *("curl", "-sS", "-o", str(tmp_path / "answer"), "-w", "%{http_code}"),
        *("-X", "POST", f"{base}/v1/traces", "-H", "content-type: application/x-protobuf"),
        *("-H", ENGINEER_HEADER, "--data-binary", f"@{tmp_path / 'trace.pb'}"),
    ]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "200", done
    assert ExportTraceServiceResponse.FromString((tmp_path / "answer").read_bytes()) == (
        ExportTraceServiceResponse()
    )
    await run_of(base, run_id)
    with client(base) as http:
        listed = http.get("/api/runs", headers=VIEWER).json()["runs"]
    assert run_id in [r["run_id"] for r in listed]
