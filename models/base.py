"""Base classes and field types shared by every record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, JsonValue

from models.digest import Digest


def _to_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


#: A point in time; must carry a time zone and is normalised to UTC so that the same instant
#: always serialises (and hashes) the same way.
Instant = Annotated[AwareDatetime, AfterValidator(_to_utc)]

#: A non-empty identifier.
Identifier = Annotated[str, Field(min_length=1, max_length=512)]

#: What a run id may be, for ingestion and for addressing it afterwards (a URL path segment, a
#: CLI argument): no ``/``, space, newline or other character that cannot be addressed.
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,199}$"
RunId = Annotated[str, Field(pattern=RUN_ID_PATTERN)]

__all__ = [
    "RUN_ID_PATTERN",
    "Digest",
    "HashedRecord",
    "Identifier",
    "Instant",
    "Record",
    "RunId",
    "format_instant",
    "object_schema",
]


def object_schema() -> dict[str, JsonValue]:
    """``{"type": "object"}``: the JSON Schema of a tool's arguments when none is declared."""
    return {"type": "object"}


def format_instant(value: datetime) -> str:
    """The one textual form of an instant inside hashed material: UTC, microseconds, ``Z``."""
    offset = value.utcoffset()
    if offset is None:
        raise ValueError("an instant must carry a time zone")
    if offset:
        value = value.astimezone(UTC)
    # isoformat is C code; in UTC it ends with "+00:00", replaced by "Z"
    return value.isoformat(timespec="microseconds")[:-6] + "Z"


class Record(BaseModel):
    """An immutable record. Unknown fields are refused so that nothing is silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_timedelta="iso8601")


class HashedRecord(Record):
    """A record whose canonical JSON is hashed into evidence; it carries its schema version."""

    SCHEMA_VERSION: ClassVar[int] = 1
    schema_version: int = Field(default=1, ge=1)

    def canonical_payload(self) -> dict[str, Any]:
        """The JSON value that is canonicalised and hashed for this record."""
        return self.model_dump(mode="json")

    def record_hash(self) -> str:
        """``sha256:`` digest of the record's canonical JSON (RFC 8785)."""
        from models.canonical import canonical_hash

        return canonical_hash(self.canonical_payload())
