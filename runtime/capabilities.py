"""The versioned capability registry: every tool an agent may call and its side-effect class."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jsonschema

from models.canonical import canonical_hash
from models.capability import Capability
from models.errors import InvalidInputError, UnknownCapabilityError
from models.model_call import ToolSchema


class CapabilityRegistry:
    """Capabilities by id, with a version the run pins and a hash of the whole catalogue."""

    def __init__(self, version: str, capabilities: Iterable[Capability]) -> None:
        self.version = version
        self._capabilities: dict[str, Capability] = {}
        # built once: a validator compiles its schema's keywords, and arguments are checked on
        # every recorded tool call (the recording path's CPU)
        self._validators: dict[str, jsonschema.Draft202012Validator] = {}
        for capability in capabilities:
            if capability.capability_id in self._capabilities:
                raise InvalidInputError(f"capability {capability.capability_id!r} declared twice")
            jsonschema.Draft202012Validator.check_schema(capability.schema_)
            self._capabilities[capability.capability_id] = capability
            self._validators[capability.capability_id] = jsonschema.Draft202012Validator(
                capability.schema_
            )

    def get(self, capability_id: str) -> Capability:
        try:
            return self._capabilities[capability_id]
        except KeyError:
            raise UnknownCapabilityError(
                f"capability {capability_id!r} is not in registry {self.version} "
                f"(known: {', '.join(sorted(self._capabilities))})"
            ) from None

    def __contains__(self, capability_id: object) -> bool:
        return capability_id in self._capabilities

    def __iter__(self) -> Iterator[Capability]:
        return iter(self._capabilities.values())

    def validate_arguments(self, capability_id: str, arguments: Mapping[str, Any]) -> None:
        """Refuse arguments that do not match the capability's JSON Schema, naming the field."""
        self.get(capability_id)  # an unknown capability is named first
        error = jsonschema.exceptions.best_match(
            self._validators[capability_id].iter_errors(dict(arguments))
        )
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
            raise InvalidInputError(f"{capability_id}: argument {where}: {error.message}")

    def tool_schemas(self) -> tuple[ToolSchema, ...]:
        """The catalogue as offered to a model."""
        return tuple(
            ToolSchema(name=c.capability_id, description=c.description, parameters=c.schema_)
            for c in sorted(self._capabilities.values(), key=lambda c: c.capability_id)
        )

    def catalog_hash(self) -> str:
        """Hash of every declaration: a changed schema or class changes the tool bundle."""
        return canonical_hash(
            {
                "version": self.version,
                "capabilities": [
                    # a capability declaring no person records hashes as it did before they
                    # existed: old recordings keep matching their catalogs
                    c.model_dump(
                        mode="json",
                        by_alias=True,
                        exclude={"person_records"} if c.person_records is None else None,
                    )
                    for c in sorted(self._capabilities.values(), key=lambda c: c.capability_id)
                ],
            }
        )
