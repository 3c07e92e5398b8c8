"""Versioned agent graphs (rule 9): a graph id and version name one definition forever, so a
run recorded under v1 can still be loaded after v2 is registered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from models.errors import ConflictError, GraphNotFoundError, InvalidInputError, StateMigrationError

if TYPE_CHECKING:
    from runtime.environment import AgentEnvironment

State = dict[str, Any]


@dataclass(frozen=True)
class StepResult:
    state: State
    #: the next step, or None when the run is finished
    next: str | None
    #: what the step reports (recorded with STEP_COMPLETED); the last step's is the run outcome
    output: Any = None


Step = Callable[["AgentEnvironment", State, Any], Awaitable[StepResult]]
#: a migration from schema version N to N+1
Migration = Callable[[State], State]


@dataclass(frozen=True)
class GraphDefinition:
    graph_id: str
    version: str
    entry: str
    steps: Mapping[str, Step]
    state_schema_version: int = 1
    #: migrations[n] turns a version-n state into a version-(n+1) state
    migrations: Mapping[int, Migration] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        if self.entry not in self.steps:
            raise InvalidInputError(
                f"graph {self.graph_id}@{self.version}: entry step {self.entry!r} is not a step"
            )

    @property
    def key(self) -> str:
        return f"{self.graph_id}@{self.version}"

    def migration_path(self, from_version: int) -> list[int]:
        """The migrations to apply to a state recorded under ``from_version``; raises when a
        link is missing or the state is newer than this graph."""
        if from_version > self.state_schema_version:
            raise StateMigrationError(
                f"{self.key}: state schema {from_version} is newer than the graph's {self.state_schema_version}"
            )
        path = list(range(from_version, self.state_schema_version))
        missing = [n for n in path if n not in self.migrations]
        if missing:
            raise StateMigrationError(
                f"{self.key}: no migration from state schema {missing[0]} to {missing[0] + 1}"
            )
        return path

    def migrate(self, state: State, from_version: int) -> tuple[State, str | None]:
        """Return the migrated state and the migration version (``"1->3"``), or None if none."""
        path = self.migration_path(from_version)
        migrated = dict(state)
        for n in path:
            migrated = self.migrations[n](migrated)
        return migrated, (f"{from_version}->{self.state_schema_version}" if path else None)


class GraphRegistry:
    """Every graph version ever registered stays loadable."""

    def __init__(self) -> None:
        self._graphs: dict[tuple[str, str], GraphDefinition] = {}

    def register(self, graph: GraphDefinition) -> GraphDefinition:
        existing = self._graphs.get((graph.graph_id, graph.version))
        if existing is not None and existing is not graph:
            raise ConflictError(f"graph {graph.key} is already registered with another definition")
        self._graphs[(graph.graph_id, graph.version)] = graph
        return graph

    def get(self, graph_id: str, version: str) -> GraphDefinition:
        try:
            return self._graphs[(graph_id, version)]
        except KeyError:
            known = ", ".join(sorted(v for g, v in self._graphs if g == graph_id)) or "none"
            raise GraphNotFoundError(
                f"graph {graph_id}@{version} is not registered (versions: {known})"
            ) from None

    def versions(self, graph_id: str) -> list[str]:
        return sorted(v for g, v in self._graphs if g == graph_id)
