"""Capability descriptors: what a tool is allowed to do, and how replay must treat it."""

from __future__ import annotations

from pydantic import ConfigDict, Field, JsonValue

from models.base import Identifier, Record, object_schema
from models.enums import SideEffectClass


class PersonRecords(Record):
    """How a capability's results name people: every object of a result that has
    ``id_field`` is one person's record, the data subject ``<subject_prefix>:<id>``, whose
    ``name_fields`` hold their name (redacted wherever it appears later in the run)."""

    id_field: str
    subject_prefix: str
    name_fields: tuple[str, ...] = ("name",)

    model_config = ConfigDict(frozen=True, extra="forbid")


class Capability(Record):
    """A tool the agent may call, as declared in the versioned capability registry.

    ``side_effect_class`` decides everything at replay: a WRITE never executes (rule 4).
    Anything not declared READ is WRITE.
    """

    capability_id: Identifier
    version: str = "1"
    description: str = ""
    #: JSON Schema of the arguments
    schema_: dict[str, JsonValue] = Field(default_factory=object_schema, alias="schema")
    side_effect_class: SideEffectClass = SideEffectClass.WRITE
    idempotent: bool = False
    #: what replay returns on a fixture miss under the STUB policy
    stub: JsonValue = None
    #: whether replay may call it live (only ever for READ capabilities, rule 3)
    sandbox_live_allowed: bool = False
    #: the id of a SideEffectReconciler that can ask the provider what happened
    reconciler: str | None = None
    #: argument names that identify a person (redacted in the sanitized view)
    personal_fields: tuple[str, ...] = ()
    #: the people whose records its results hold (a CRM lookup): each becomes a data subject
    #: of the run and their names are redacted (``redact-v2``)
    person_records: PersonRecords | None = None

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @property
    def is_write(self) -> bool:
        return self.side_effect_class is SideEffectClass.WRITE


def side_effect_class_from_hints(
    read_only_hint: bool | None, destructive_hint: bool | None = None
) -> SideEffectClass:
    """MCP tool annotations mapped to our classes: only an explicit ``readOnlyHint: true`` makes
    a tool READ. ``destructiveHint`` and missing hints leave it WRITE (unknown is WRITE)."""
    if read_only_hint is True and destructive_hint is not True:
        return SideEffectClass.READ
    return SideEffectClass.WRITE
