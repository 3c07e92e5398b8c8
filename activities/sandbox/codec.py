"""JSON forms of what crosses the sandbox pipe: bytes, records, events and errors.

Records travel as ``{"$record": <class name>, "data": ...}`` and are re-validated on arrival,
so a forged or malformed record from the untrusted side fails validation in the parent.
"""

from __future__ import annotations

import base64
import importlib
from dataclasses import asdict
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from models import ExecutionEvent, ExecutionEventType, HashedRecord, RunRecord, RunStatus
from models import errors as error_tree
from models.errors import ReplaybookError
from runtime.ports import NewEvent

_RECORD_MODULES = (
    "models.evidence",
    "models.execution",
    "models.freeze",
    "models.incident",
    "models.regression",
    "models.replay",
    "models.report_bundle",
)


def _record_types() -> dict[str, type[BaseModel]]:
    # every module defining a HashedRecord, imported here: ``models`` loads its records on
    # first use, so a subclass not imported yet would be missing from the walk below
    for module in _RECORD_MODULES:
        importlib.import_module(module)
    found: dict[str, type[BaseModel]] = {"RunRecord": RunRecord, "ExecutionEvent": ExecutionEvent}
    pending: list[type] = [HashedRecord]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found


RECORD_TYPES = _record_types()


def record_type(name: str) -> type[Any]:
    try:
        return RECORD_TYPES[name]
    except KeyError:
        raise error_tree.InvalidInputError(f"unknown record type {name!r}") from None


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def dump_model(value: BaseModel) -> dict[str, Any]:
    return {"$record": type(value).__name__, "data": value.model_dump(mode="json")}


def load_model(value: dict[str, Any]) -> Any:
    return record_type(value["$record"]).model_validate(value["data"])


def dump_new_event(event: NewEvent) -> dict[str, Any]:
    return {
        "step_id": event.step_id,
        "type": event.type.value,
        "logical_time": event.logical_time.isoformat(),
        "record": dump_model(event.record) if event.record is not None else None,
        "payload": event.payload,
        "event_id": event.event_id,
        # the raw view of a sanitized payload (rule 17), sealed by the ledger in the worker
        "raw": b64(getattr(event, "raw", None)),
        "redaction_policy_version": getattr(event, "redaction_policy_version", None),
        "subject_id": getattr(event, "subject_id", None),
    }


def load_new_event(value: dict[str, Any]) -> NewEvent:
    record = load_model(value["record"]) if value.get("record") is not None else None
    if record is not None and not isinstance(record, HashedRecord):
        raise error_tree.InvalidInputError("an event's record must be a hashed record")
    return NewEvent(
        raw=unb64(value.get("raw")),
        redaction_policy_version=value.get("redaction_policy_version"),
        subject_id=value.get("subject_id"),
        step_id=str(value["step_id"]),
        type=ExecutionEventType(value["type"]),
        logical_time=datetime.fromisoformat(value["logical_time"]),
        record=record,
        payload=value.get("payload"),
        event_id=str(value["event_id"]),
    )


def load_status(value: str) -> RunStatus:
    return RunStatus(value)


def dump_error(exc: BaseException) -> dict[str, Any]:
    name = type(exc).__name__ if isinstance(exc, ReplaybookError) else "StoreError"
    extra = {
        k: v for k, v in vars(exc).items() if isinstance(v, str | int | float | bool | type(None))
    }
    message = str(exc) if isinstance(exc, ReplaybookError) else f"{type(exc).__name__}: {exc}"
    return {"type": name, "message": message, "attributes": extra}


def load_error(value: dict[str, Any]) -> ReplaybookError:
    """The error the other side raised, as the same class of the one error tree (its name is
    what Temporal's retry policy matches), or ``ReplaybookError`` for a name not in the tree."""
    cls = getattr(error_tree, str(value.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, ReplaybookError)):
        cls = ReplaybookError
    return cls.restored(str(value.get("message", "")), value.get("attributes") or {})


def dump_context(context: Any) -> dict[str, Any]:
    data = asdict(context)
    data["logical_time"] = context.logical_time.isoformat()
    return data
