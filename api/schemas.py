"""Request and response bodies of the API. Field names are camelCase (the seed's
``sourceRunId``, ``candidatePromptVersion``…); unknown fields are refused, so that a typo is an
error naming the field rather than a silently ignored option."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from models import FixtureMissPolicy, ReplayBudget, ReplayMode
from models.base import RUN_ID_PATTERN
from models.enums import AgentFailureType

#: ids in bodies and paths: the run-id pattern (ingestion accepts no run id that cannot be
#: addressed afterwards, and addressing refuses what ingestion never accepts)
ID_PATTERN = RUN_ID_PATTERN
#: a run id in a path
RunIdPath = Annotated[str, Path(pattern=RUN_ID_PATTERN, description="The run's id.")]


# functions, not shared FieldInfo objects: each field gets its own (and its own alias)
def Id() -> Any:
    return Field(min_length=1, max_length=200, pattern=ID_PATTERN)


def Text() -> Any:
    return Field(min_length=1, max_length=10_000)


def Version() -> Any:
    return Field(default=None, min_length=1, max_length=200)


class Body(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Budget(Body):
    max_model_calls: int | None = Field(default=None, ge=0, le=1_000_000)
    max_tokens: int | None = Field(default=None, ge=0, le=10**12)
    max_cost: Decimal | None = Field(default=None, ge=0, le=10**9, allow_inf_nan=False)
    #: seconds
    max_duration: float | None = Field(default=None, ge=0, le=30 * 24 * 3600)

    def to_model(self) -> ReplayBudget:
        return ReplayBudget(
            max_model_calls=self.max_model_calls,
            max_tokens=self.max_tokens,
            max_cost=self.max_cost,
            max_duration=None
            if self.max_duration is None
            else timedelta(seconds=self.max_duration),
        )


def CandidateSystemPrompt() -> Any:
    """A tool-loop run's candidate compiled system prompt (text; stored as an artifact, only
    its digest goes on)."""
    return Field(default=None, min_length=1, max_length=1024 * 1024)


def ToolsModule() -> Any:
    """The team's read-only tools (``package.module[:ATTRIBUTE]`` or a ``replaybook.tools``
    entry-point name, installed beside the server): with ``fixtureMissPolicy`` SANDBOX_LIVE
    they answer READ fixture misses inside the sandbox (``docs/your-tools.md``)."""
    return Field(default=None, min_length=1, max_length=300)


def CandidateTools() -> Any:
    """A tool-loop run's candidate tool catalogue: tools as the run's catalogue records them
    (``name``, ``description``, ``parameters``, ``side_effect_class``) or OpenAI function
    schemas; stored as an artifact, only its digest goes on."""
    return Field(default=None, max_length=1000)


class ReplayCreate(Body):
    source_run_id: str = Id()
    mode: ReplayMode
    candidate_prompt_version: str | None = Version()
    candidate_model: str | None = Version()
    #: replays with this model when the recorded one is not configured (in the manifest)
    substitute_model: str | None = Version()
    candidate_system_prompt: str | None = CandidateSystemPrompt()
    candidate_tools: list[dict[str, Any]] | None = CandidateTools()
    tools_module: str | None = ToolsModule()
    #: the first step regenerated: history before it, the step itself and every step after it
    #: re-run (``"planner"`` re-runs the planner under the candidate)
    start_from_step: str | None = Version()
    policy_version: str | None = Version()
    retriever_version: str | None = Version()
    deny_approvals: list[str] = Field(default_factory=list, max_length=100)
    budget: Budget = Budget()
    repeat: int = Field(default=1, ge=1, le=1000)
    fixture_miss_policy: FixtureMissPolicy = FixtureMissPolicy.FAIL
    simulation: bool = False
    #: live model calls one replay of a tool-loop run may make (each repeat on its own);
    #: absent: 6 (an imported tau-bench run: its own limit, the benchmark's 30), 0: no cap but
    #: the recorded run's own limit
    max_loop_calls: int | None = Field(default=None, ge=0, le=10_000)

    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "sourceRunId": "run-9182",
                "mode": "PROMPT_SWAP",
                "candidatePromptVersion": "v18",
                "budget": {"maxModelCalls": 20, "maxCost": 3.0},
            }
        }
    )


class ReplayAccepted(Body):
    replay_id: str
    status: Literal["QUEUED"] = "QUEUED"


class CancelAccepted(Body):
    replay_id: str
    status: Literal["CANCEL_REQUESTED"] = "CANCEL_REQUESTED"


class CounterfactualBody(Body):
    kind: Literal["prompt", "model", "policy", "retriever"]
    value: str = Field(min_length=1, max_length=200)


class IncidentCreate(Body):
    source_run_id: str = Id()
    counterfactuals: list[CounterfactualBody] = Field(default_factory=list, max_length=20)
    repeat: int = Field(default=20, ge=1, le=1000)
    fixture_miss_policy: FixtureMissPolicy = FixtureMissPolicy.FAIL
    retention_days: int = Field(default=730, ge=1, le=36_500)
    #: one budget shared by every replay of the incident (fields as for replays)
    budget: Budget = Budget()
    retry_not_applied: bool = False
    #: fork-replay the top K ranked fork points, before the whole-run counterfactuals
    fork_points: int = Field(default=0, ge=0, le=20)
    #: with ``forkPoints``: the fork replays instead of the whole-run counterfactuals
    fork_first: bool = False
    #: the registered model every replay of the incident calls instead of the recorded one
    substitute_model: str | None = Version()
    #: counterfactuals for a tool-loop run: a system prompt and a tool catalogue to try
    candidate_system_prompt: str | None = CandidateSystemPrompt()
    candidate_tools: list[dict[str, Any]] | None = CandidateTools()
    tools_module: str | None = ToolsModule()


class IncidentAccepted(Body):
    incident_id: str
    source_run_id: str
    phase: str = "FREEZING"


class RootCauseBody(Body):
    root_cause: str = Text()
    fix_version: str = Field(min_length=1, max_length=200)
    verified_by: str = Field(min_length=1, max_length=200)
    #: the replays of this incident the cause rests on (default: all of them)
    replay_ids: list[str] = Field(default_factory=list, max_length=100)
    #: the human's failure type (overrides the automatic classification; both are kept)
    failure_type: AgentFailureType | None = None
    #: expected behaviour in the expectation language (``models.expectations``)
    expectations: list[str] = Field(default_factory=list, max_length=50)


class RootCauseConfirmed(Body):
    incident_id: str
    confirmed: bool = True
    verified_by: str
    replay_ids: list[str]
    failure_type: AgentFailureType | None = None
    expectations: list[str] = Field(default_factory=list)


class ResolutionBody(Body):
    outcome: Literal["applied", "not-applied"]
    evidence: str = Text()
    resolved_by: str = Field(min_length=1, max_length=200)


def camel(value: Any) -> Any:
    """A view's keys in camelCase (views of replays and incidents; their keys are field
    names, never data)."""
    if isinstance(value, dict):
        return {to_camel(k) if isinstance(k, str) else k: camel(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [camel(v) for v in value]
    return value


class AlertmanagerAlert(BaseModel):
    """One alert of an Alertmanager webhook notification (fields we do not read are kept)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    status: Literal["firing", "resolved"] = "firing"
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    fingerprint: str = Field(min_length=1, max_length=200)


class AlertmanagerWebhook(BaseModel):
    """The Prometheus Alertmanager webhook payload (``version`` "4")."""

    model_config = ConfigDict(extra="allow", frozen=True)
    version: str = "4"
    status: Literal["firing", "resolved"] = "firing"
    receiver: str = ""
    alerts: list[AlertmanagerAlert] = Field(default_factory=list, max_length=1000)
