"""The records of forensics against ground truth (``integrations.tau_bench.forensics``): a run's tool calls
and expected actions as ``compare_expected`` reads them, and the comparison it returns."""

from __future__ import annotations

from pydantic import Field, JsonValue

from models.base import Record

ERROR_PREFIX = "Error:"


class ToolCallFact(Record):
    """One tool call of a run and its recorded answer (positions are 0-based message indexes)."""

    assistant_index: int
    tool_index: int | None = None
    call_id: str | None = None
    name: str
    arguments: JsonValue = None
    #: the arguments could not be parsed as a JSON object (the tool then ran on nothing)
    arguments_invalid: bool = False
    output: str | None = None
    is_write: bool = False

    @property
    def failed(self) -> bool:
        """The tool refused the call: a failed write changed nothing."""
        return (self.output or "").startswith(ERROR_PREFIX) or self.arguments_invalid


class ExpectedAction(Record):
    name: str
    arguments: JsonValue


class ForensicsRun(Record):
    """Everything compare_expected needs about one run: pure data, no store, no files."""

    run_id: str
    domain: str
    task_id: str
    trial: int = 0
    calls: tuple[ToolCallFact, ...] = ()
    #: (message index, text) of every assistant message with text: what the user was told
    agent_texts: tuple[tuple[int, str], ...] = ()
    expected_actions: tuple[ExpectedAction, ...] = ()
    expected_outputs: tuple[str, ...] = ()
    write_tools: tuple[str, ...] = ()
    #: tool name -> its parameters' JSON schema (used to drop undeclared properties)
    schemas: dict[str, JsonValue] = Field(default_factory=dict)
    recorded_reward: float | None = None
    #: the benchmark commit whose databases the run was recorded against (import metadata)
    env_version: str | None = None
    n_messages: int = 0
    #: the episode reached its end (user stopped, or handed to a human); an unfinished one is
    #: never scored, so it cannot pass (None: unknown, treated as finished)
    finished: bool | None = None


class WriteDiff(Record):
    kind: str  # "missing" | "extra" | "differing"
    name: str
    expected: JsonValue = None
    actual: JsonValue = None
    #: argument names whose values differ (differing only)
    arguments: tuple[str, ...] = ()
    #: assistant message of the actual write (extra, differing)
    message_index: int | None = None


class Finding(Record):
    """A critical fact about the run's writes, reported whatever the predicted verdict."""

    code: str
    severity: str
    #: ``same_action`` or ``same_key_arguments`` (models.duplicates)
    kind: str
    tool: str
    action_hash: str
    #: 0-based message indexes of the assistant messages that made the writes
    message_indexes: tuple[int, ...]
    explanation: str


class ExpectedComparison(Record):
    run_id: str
    domain: str
    task_id: str
    trial: int
    recorded_reward: float | None
    writes_executed: int
    writes_failed: int
    writes_match: bool
    missing: tuple[WriteDiff, ...] = ()
    extra: tuple[WriteDiff, ...] = ()
    differing: tuple[WriteDiff, ...] = ()
    outputs: dict[str, bool] = Field(default_factory=dict)
    #: the first message where the run left the path to the expected outcome (0-based)
    first_divergent_message_index: int | None = None
    #: baseline for localisation: the first write whose output starts with ``Error:``
    first_error_write_index: int | None = None
    #: the replayed world's final state equals the expected actions' final state (None: no world)
    world_state_matches: bool | None = None
    finished: bool | None = None
    predicted_reward: float
    signature: str | None = None
    signature_key: str | None = None
    contributing: tuple[str, ...] = ()
    #: critical findings beside the verdict: ``SIDE_EFFECT_DUPLICATE`` per duplicated write
    findings: tuple[Finding, ...] = ()
    #: the predicted root cause in the AgentRx taxonomy (integrations.tau_bench.agentrx) and its step, as
    #: AgentRx numbers steps (1-based message index): None when the run is predicted to pass
    category: str | None = None
    category_step: int | None = None
