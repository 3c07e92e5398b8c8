"""``replaybook.run(...)``: one recorded run of the agent, as a context manager (sync or async)
or a decorator. Its events are numbered here (the client's ``sequence``) and spooled at once;
the sender posts them in the background."""

from __future__ import annotations

import contextvars
import functools
import inspect
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from replaybook import _pins
from replaybook._config import Config, report
from replaybook._jsonsafe import json_safe
from replaybook._sender import sender
from replaybook._spool import RunSpool

F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: contextvars.ContextVar[Run | None] = contextvars.ContextVar(
    "replaybook_run", default=None
)
#: open runs of this process, for code that runs outside the run's context (a thread pool
#: that does not copy context variables): used when exactly one run is open
_OPEN: list[Run] = []
_OPEN_LOCK = threading.Lock()
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
SDK_VERSION = "0.1.0"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def current_run() -> Run | None:
    run = _CURRENT.get()
    if run is not None and run.active:
        return run
    with _OPEN_LOCK:
        return _OPEN[0] if len(_OPEN) == 1 else None


def new_run_id(agent: str) -> str:
    slug = _SLUG.sub("-", agent).strip("-._")[:80] or "agent"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"{slug}-{stamp}-{uuid.uuid4().hex[:10]}"


class Run:
    """A run being recorded. Use ``replaybook.run(...)``."""

    def __init__(
        self,
        agent: str,
        *,
        system_prompt: str | None = None,
        tools: Sequence[Any] | None = None,
        model: str | None = None,
        run_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        pinned: Mapping[str, str] | None = None,
        initial_messages: Sequence[Mapping[str, Any]] | None = None,
        user_turns: bool = False,
        max_model_calls: int | None = None,
        terminate_tools: Sequence[str] = (),
        answers_before_end: int = 1,
        attachments: Mapping[str, Any] | None = None,
        config: Config | None = None,
    ) -> None:
        self.agent = agent
        self._given_run_id = run_id
        self.run_id = run_id or new_run_id(agent)
        self.system_prompt = system_prompt
        self.tools = list(tools) if tools is not None else None
        self.model = model
        self.labels = dict(labels or {})
        self.pinned = dict(pinned or {})
        self.initial_messages = (
            [dict(m) for m in initial_messages] if initial_messages is not None else None
        )
        self.user_turns = user_turns
        self.max_model_calls = max_model_calls
        self.terminate_tools = tuple(terminate_tools)
        self.answers_before_end = answers_before_end
        self.attachments = dict(attachments or {})
        #: what the run produced, recorded as the source's outcome at its end (JSON-able)
        self.outcome: Any = None
        self._config = config
        self._lock = threading.RLock()
        self._sequence = 0
        self._spool: RunSpool | None = None
        self._header_written = False
        self._broken = False
        self._token: contextvars.Token[Run | None] | None = None
        self.started_at = ""
        self.active = False
        self.ended = False
        #: the model's last tool calls not yet matched to a tool execution: (id, name, args)
        self._open_calls: list[tuple[str, str, dict[str, Any]]] = []
        self._user_turns = 0
        self._intents: dict[str, int] = {}

    # -- as a decorator ---------------------------------------------------------------------

    def _fresh(self) -> Run:
        return Run(
            self.agent,
            system_prompt=self.system_prompt,
            tools=self.tools,
            model=self.model,
            run_id=self._given_run_id,
            labels=self.labels,
            pinned=self.pinned,
            initial_messages=self.initial_messages,
            user_turns=self.user_turns,
            max_model_calls=self.max_model_calls,
            terminate_tools=self.terminate_tools,
            answers_before_end=self.answers_before_end,
            attachments=self.attachments,
            config=self._config,
        )

    def __call__(self, fn: F) -> F:
        """Each call of ``fn`` is a run of its own (its return value is the run's outcome)."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def arun(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh() as run:
                    result = await fn(*args, **kwargs)
                    run.outcome = result
                    return result

            return arun  # type: ignore[return-value]

        @functools.wraps(fn)
        def srun(*args: Any, **kwargs: Any) -> Any:
            with self._fresh() as run:
                result = fn(*args, **kwargs)
                run.outcome = result
                return result

        return srun  # type: ignore[return-value]

    # -- as a context manager ---------------------------------------------------------------

    def __enter__(self) -> Run:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.end(error=exc)

    async def __aenter__(self) -> Run:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)

    @property
    def config(self) -> Config:
        if self._config is None:
            from replaybook import _state

            self._config = _state.config()
        return self._config

    def start(self) -> None:
        if self.active or self.ended:
            raise RuntimeError(f"run {self.run_id!r} was already started")
        self.started_at = now_iso()
        self.active = True
        self._token = _CURRENT.set(self)
        with _OPEN_LOCK:
            _OPEN.append(self)
        try:
            self._spool = RunSpool.create(self.config.spool_dir, self.run_id)
            sender(self.config).add(self._spool)
        except Exception as exc:
            self._broken = True
            report(self.config, f"run {self.run_id!r} cannot be spooled", exc)

    def end(self, error: BaseException | None = None) -> None:
        """Record the run's end (``COMPLETED``, or ``FAILED`` with ``error``)."""
        if not self.active:
            return
        event: dict[str, Any] = {"type": "run_end", "status": "COMPLETED"}
        if error is not None:
            event["status"] = "FAILED"
            event["error"] = f"{type(error).__name__}: {error}"[:2000]
        if self.outcome is not None:
            event["outcome"] = json_safe(self.outcome)
        try:
            self.emit(event, urgent=True)
        finally:
            self.active = False
            self.ended = True
            if self._spool is not None:
                self._spool.ended = True
            with _OPEN_LOCK:
                if self in _OPEN:
                    _OPEN.remove(self)
            if self._token is not None:
                try:
                    _CURRENT.reset(self._token)
                except ValueError:  # ended in another context (a task): nothing to reset
                    _CURRENT.set(None)
        if self.config.strict:
            self._settle_strictly()

    def _settle_strictly(self) -> None:
        from replaybook._config import RecordingError

        send = sender(self.config)
        if self.config.url and not send.drain(self.config.exit_timeout):
            raise RecordingError(f"run {self.run_id!r}: the server did not take every event")
        if send.errors:
            raise RecordingError("; ".join(send.errors))

    # -- events -----------------------------------------------------------------------------

    def emit(
        self,
        event: dict[str, Any],
        *,
        durable: bool = False,
        urgent: bool = False,
        request_tools: list[Any] | None = None,
    ) -> int:
        """Number and spool one event; ``durable``: fsync'ed (with all before it) on return.
        Returns its sequence (0 when it could not be spooled)."""
        if self._broken or self._spool is None:
            return 0
        try:
            with self._lock:
                if not self._header_written:
                    self._write_header(event, request_tools)
                self._sequence += 1
                event["sequence"] = self._sequence
                event.setdefault("at", now_iso())
                self._spool.append("e", event, durable=durable)
                sequence = self._sequence
        except Exception as exc:
            # a run with a hole in its sequence cannot be ingested past it: stop here
            self._broken = True
            report(self.config, f"run {self.run_id!r}: event could not be spooled", exc)
            return 0
        sender(self.config).notify(urgent=urgent or durable)
        return sequence

    def _write_header(self, first: dict[str, Any], request_tools: list[Any] | None) -> None:
        """The header goes out with the first event: what the agent did not declare is taken
        from its first model call (system prompt, tools, task, model)."""
        if first.get("type") == "model_call":
            self._adopt_from_first_call(first, request_tools)
        assert self._spool is not None
        self._spool.append("h", self.header())
        self._header_written = True

    def _adopt_from_first_call(self, call: dict[str, Any], request_tools: list[Any] | None) -> None:
        messages = list(call.get("messages") or [])
        if (
            self.system_prompt is None
            and messages
            and messages[0].get("role")
            in (
                "system",
                "developer",
            )
        ):
            self.system_prompt = messages[0].get("content")
            call["messages"] = messages = messages[1:]
        if self.initial_messages is None and not self.user_turns:
            self.initial_messages = messages
        if self.tools is None and request_tools:
            self.tools = request_tools
        if self.model is None:
            self.model = call.get("model")

    def header(self) -> dict[str, Any]:
        from replaybook._tools import catalog_entry, registry

        tools = [catalog_entry(t) for t in (self.tools or [])]
        pinned = {**({"model_profile": self.model} if self.model else {}), **self.pinned}
        source_code = _pins.git_state()
        header: dict[str, Any] = {
            "run_id": self.run_id,
            "started_at": self.started_at,
            "pinned": pinned,
            "environment": _pins.environment(),
            "labels": {"agent": self.agent, "source": "replaybook-sdk", **self.labels},
            "system_prompt": self.system_prompt,
            "tools": tools,
            "initial_messages": self.initial_messages or [],
            "user_turns": self.user_turns,
            "terminate_tools": list(self.terminate_tools),
            "answers_before_end": self.answers_before_end,
            "attachments": {
                **self.attachments,
                "replaybook_sdk": json_safe(
                    {
                        "sdk_version": SDK_VERSION,
                        "packages": _pins.package_versions(),
                        "tools": {
                            t["name"]: registry()[t["name"]]
                            for t in tools
                            if t["name"] in registry()
                        },
                        "git": source_code,
                    }
                ),
            },
        }
        if source_code:
            header["source_code"] = source_code
        if self.max_model_calls is not None:
            header["max_model_calls"] = self.max_model_calls
        return header

    # -- the model's tool calls, matched to the tool executions -----------------------------

    def note_tool_calls(self, calls: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
        with self._lock:
            self._open_calls = list(calls)

    def match_tool_call(self, name: str, arguments: dict[str, Any]) -> str | None:
        """The id the model gave this call (same name and arguments, else same name)."""
        with self._lock:
            for exact in (True, False):
                for index, (call_id, called, args) in enumerate(self._open_calls):
                    if called == name and (not exact or args == arguments):
                        del self._open_calls[index]
                        return call_id
        return None

    def count_intent(self, basis: str) -> int:
        """How many intents with this basis came before in the run (this one counted)."""
        with self._lock:
            seen = self._intents.get(basis, 0)
            self._intents[basis] = seen + 1
            return seen

    # -- the small explicit calls -----------------------------------------------------------

    def user_message(self, content: str | None, done: bool = False) -> None:
        self.emit({"type": "user_message", "content": content, "done": done})

    def checkpoint(self, state: Mapping[str, Any], schema_version: int = 1) -> None:
        self.emit(
            {
                "type": "checkpoint",
                "state": json_safe(dict(state)),
                "state_schema_version": schema_version,
            }
        )


def elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
