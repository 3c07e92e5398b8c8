"""The baseline of the HTTP ingestion row: a FastAPI app with the same two routes that parses
the body and answers, storing nothing (``uvicorn bench.trivial_ingest_app:app``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

app = FastAPI()


@app.post("/api/runs", status_code=201)
async def create_run(request: Request) -> dict[str, Any]:
    header = await request.json()
    return {"run_id": header["run_id"], "recorded": 1, "next_sequence": 1}


@app.post("/api/runs/{run_id}/events", status_code=201)
async def append_events(run_id: str, request: Request) -> dict[str, Any]:
    events = (await request.json())["events"]
    return {"run_id": run_id, "recorded": len(events), "next_sequence": len(events) + 1}
