"""``POST /api/runs`` and ``POST /api/runs/{id}/events``: ingestion of runs recorded outside
Replaybook's runtime, over ``ingest`` (the format is ``models.ingest``; its records keep
their snake_case field names). Idempotent: re-sending what is recorded answers 200 and writes
nothing; something new answers 201; another event under a recorded sequence answers 409."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import structlog
from fastapi import APIRouter, Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from api.auth import OPERATE, Principal, require_role
from api.errors import naming
from api.schemas import RunIdPath
from api.state import State
from ingest import ingest_events, ingest_run
from models.canonical import parse_json
from models.errors import CanonicalizationError, NotFoundError
from models.ingest import CHECKED_JSON, IngestEventBatch, IngestRunHeader, json_text_checked

log = structlog.get_logger(__name__)
router = APIRouter(prefix="/api/runs", tags=["ingestion"])
Ingester = Annotated[Principal, Depends(require_role(*OPERATE))]
M = TypeVar("M", bound=BaseModel)
#: every answer an ingestion route can give besides its success
ANSWERS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No or an unknown bearer token"},
    403: {"description": "The token's role may not ingest"},
    404: {"description": "No such run (events of a run not created yet)"},
    409: {"description": "Another header or another event under a recorded sequence"},
    413: {"description": "The body is larger than the ingestion limit"},
    422: {"description": "Invalid input, naming the field or the position"},
    503: {"description": "The store is unavailable; retry after Retry-After seconds"},
}


async def strict_body(request: Request, model: type[M]) -> M:
    """The body as ``model``, parsed strictly: duplicate keys, NaN/Infinity, lone surrogates,
    unsafe integers and too deep nesting are refused (``parse_json``), and JSON types are
    not coerced (the format's booleans and counts are strict, ``models.ingest``)."""
    raw = await request.body()
    try:
        parse_json(raw)
    except CanonicalizationError as exc:  # named by its JSON path: ``$.a.b[2]`` → ``a.b[2]``
        raise exc.with_field(exc.path.removeprefix("$").lstrip(".") or "body") from None
    try:
        # text checked whole here: the models' walk of every value is not needed again
        checked = {CHECKED_JSON: True} if json_text_checked(raw) else None
        return model.model_validate_json(raw, context=checked)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


def _body_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that parses its body itself: the model's schema
    with its definitions written in place (a ``#/$defs/…`` reference inside an operation
    would point at the root of the OpenAPI document, where there are none)."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _inlined(schema, definitions)}},
        }
    }


def _inlined(node: Any, definitions: dict[str, Any]) -> Any:
    """``node`` with each ``{"$ref": "#/$defs/X", …}`` replaced by definition X (and the
    reference's other keys); the ingestion models' definitions hold no cycle."""
    if isinstance(node, list):
        return [_inlined(item, definitions) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inlined({**definitions[ref.removeprefix("#/$defs/")], **rest}, definitions)
    return {key: _inlined(value, definitions) for key, value in node.items()}


@router.post(
    "",
    status_code=201,
    responses={200: {"description": "The same header again: nothing written"}, **ANSWERS},
    summary="Create a run from an external agent's header (idempotent)",
    openapi_extra=_body_schema(IngestRunHeader),
)
async def create_run(
    request: Request, state: State, caller: Ingester, response: Response
) -> dict[str, Any]:
    header = await strict_body(request, IngestRunHeader)
    stores = await state.stores()
    with naming("run_id"):
        result = await ingest_run(stores.ledger, stores.artifacts, header)
    if not result.recorded:
        response.status_code = 200
    log.info("run ingested", run_id=header.run_id, caller=caller.caller, new=bool(result.recorded))
    return result.model_dump(mode="json")


@router.post(
    "/{run_id}/events",
    status_code=201,
    responses={
        200: {"description": "Every event was already recorded: nothing written"},
        **ANSWERS,
    },
    summary="Append a batch of events to an ingested run (atomic, idempotent)",
    openapi_extra=_body_schema(IngestEventBatch),
)
async def append_events(
    run_id: RunIdPath, request: Request, state: State, caller: Ingester, response: Response
) -> dict[str, Any]:
    batch = await strict_body(request, IngestEventBatch)
    stores = await state.stores()
    with naming("events"):
        try:
            result = await ingest_events(
                stores.ledger, stores.artifacts, stores.evidence, run_id, batch.events
            )
        except NotFoundError as exc:
            raise exc.with_field("run_id") from exc
    if not result.recorded:
        response.status_code = 200
    log.info("events ingested", run_id=run_id, caller=caller.caller, recorded=result.recorded)
    return result.model_dump(mode="json")
