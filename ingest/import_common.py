"""What every importer shares: reading the source file with positions in errors, deterministic
run ids, and recording converted runs through the one ingestion path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ingest import ingest_events, ingest_run
from models.canonical import canonical_hash
from models.digest import digest_hex
from models.errors import InvalidInputError
from models.ingest import IngestEvent, IngestRunHeader
from runtime.ports import ArtifactStore, EvidenceReader, IngestLedger


@dataclass(frozen=True)
class ConvertedRun:
    header: IngestRunHeader
    events: tuple[IngestEvent, ...]
    #: what the importer could not interpret (kept as OPAQUE events), for the report
    opaque: tuple[str, ...] = ()


@dataclass
class ImportReport:
    source: str
    run_ids: list[str] = field(default_factory=list)
    #: runs recorded by this import (the others were already there, unchanged)
    imported: int = 0
    already_imported: int = 0
    events_recorded: int = 0
    opaque: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "run_ids": self.run_ids,
            "runs": len(self.run_ids),
            "imported": self.imported,
            "already_imported": self.already_imported,
            "events_recorded": self.events_recorded,
            "opaque": self.opaque,
        }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicate = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"duplicate key {duplicate!r}")
    return dict(pairs)


def read_json_file(path: Path) -> Any:
    """The file's JSON; a syntax error names the line and column. NaN/Infinity, duplicate
    keys and nesting too deep to read are refused up front (nothing is recorded)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 at byte {exc.start}") from None
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except ValueError as exc:  # NaN, a duplicate key, a number too long to read
        raise InvalidInputError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInputError(f"{path}: invalid JSON: nested too deeply") from None


def check_number(
    record: Mapping[str, Any], key: str, where: str, *, whole: bool = False, optional: bool = False
) -> None:
    """Refuse ``record[key]`` unless it is a JSON number (a whole one with ``whole``; with
    ``optional`` also absent or null), naming the place: a text that reads as a number is not
    coerced (``"0"`` and ``0`` would make two runs of one trial, ``"1.0"`` a reward that never
    equals 1.0)."""
    value = record.get(key)
    if value is None and optional:
        return
    kind = "a whole number" if whole else "a number"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (whole and isinstance(value, float))
    ):
        raise InvalidInputError(f"{where}.{key}: must be {kind}, not {value!r}")


def content_id(*parts: Any) -> str:
    """A short digest of the content a run was imported from: the same content gives the same
    run id, so a second import finds the run already there."""
    try:
        return digest_hex(canonical_hash(list(parts)))[:16]
    except InvalidInputError:  # no canonical form (NaN …): the JSON text still identifies it
        return digest_hex(canonical_hash(json.dumps(list(parts), sort_keys=True, default=str)))[:16]


M = TypeVar("M", bound=BaseModel)


def build(where: str, model: type[M], data: Any) -> M:
    """Validate ``data`` as ``model``; an error names the position and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InvalidInputError(f"{where}: {loc}: {first['msg']}") from None


async def record_converted(
    ledger: IngestLedger,
    artifacts: ArtifactStore,
    evidence: EvidenceReader,
    runs: Sequence[ConvertedRun],
    report: ImportReport,
) -> ImportReport:
    for run in runs:
        created = await ingest_run(ledger, artifacts, run.header)
        result = await ingest_events(ledger, artifacts, evidence, run.header.run_id, run.events)
        report.run_ids.append(run.header.run_id)
        if created.recorded or result.recorded:
            report.imported += 1
        else:
            report.already_imported += 1
        report.events_recorded += result.recorded
        report.opaque.extend(run.opaque)
    return report
