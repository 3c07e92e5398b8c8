"""``@replaybook.tool``: a tool call recorded as a fixture keyed (by the server) by the canonical
hash of ``{name, arguments}``, with the name the model sees and the arguments as the model sent
them (the call's own arguments, defaults not filled in), so a replay by the generic tool loop
finds the fixture of every call the model made.

A WRITE tool is write-ahead: its intent (``tool_intent``) is spooled and fsync'ed before the
function runs, and its result (``tool_result``) recorded after: CONFIRMED when it returns,
FAILED when it raises ``WriteFailed`` (it proved nothing changed), UNKNOWN for any other
exception (it may have changed something). A process killed in between leaves the intent
EXECUTING on the server, which its lease sweep turns UNKNOWN. Never retried by the SDK.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal, ParamSpec, Protocol, TypeVar, overload

from replaybook._config import report
from replaybook._jsonsafe import json_safe
from replaybook._run import Run, current_run
from replaybook._schema import function_schema

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
SideEffect = Literal["read", "write"]


class Tool(Protocol[P, R_co]):
    """A function decorated with ``@replaybook.tool``: called as before, recorded."""

    #: the OpenAI tool schema (``{"type": "function", "function": {name, description,
    #: parameters}}``)
    schema: dict[str, Any]
    #: the name the model sees
    tool_name: str
    side_effect: SideEffect
    capability: str | None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("replaybook_key", default=None)
#: tool name -> {"side_effect": "read"|"write", "capability": ...} of every decorated tool
_REGISTRY: dict[str, dict[str, str | None]] = {}
_REGISTRY_LOCK = threading.Lock()


class WriteFailed(Exception):
    """Raise it from a WRITE tool when the write certainly did not happen (the provider refused
    it): recorded FAILED. Any other exception after a write started is recorded UNKNOWN."""


def registry() -> dict[str, dict[str, str | None]]:
    return _REGISTRY


def idempotency_key() -> str:
    """The idempotency key of the WRITE being executed: the same for the same intent (the run,
    the model's tool call, the tool and its arguments), to pass to the provider so a repeated
    request changes nothing twice."""
    key = _KEY.get()
    if key is None:
        raise LookupError(
            "replaybook.idempotency_key() is available inside a "
            "@replaybook.tool(side_effect='write') function only"
        )
    return key


def catalog_entry(tool: Any) -> dict[str, Any]:
    """A header tool from a decorated function, an OpenAI tool schema or a plain dict."""
    schema = getattr(tool, "schema", None)
    if schema is not None and hasattr(tool, "side_effect"):
        fn = schema["function"]
        return {
            "name": fn["name"],
            "description": fn.get("description") or "",
            "parameters": fn.get("parameters") or {"type": "object"},
            "side_effect_class": tool.side_effect.upper(),
        }
    if callable(tool):
        raise TypeError(
            f"tools=: {getattr(tool, '__name__', tool)!r} is not decorated with @replaybook.tool"
        )
    data = dict(tool)
    if data.get("type") == "function" and "function" in data:
        data = dict(data["function"])
    name = data["name"]
    entry: dict[str, Any] = {
        "name": name,
        "description": data.get("description") or "",
        "parameters": data.get("parameters") or {"type": "object"},
    }
    effect = data.get("side_effect_class") or data.get("side_effect")
    if effect is None and name in _REGISTRY:
        effect = _REGISTRY[name]["side_effect"]
    if effect is not None:
        entry["side_effect_class"] = str(effect).upper()
    for hint in ("read_only_hint", "destructive_hint"):
        if hint in data:
            entry[hint] = data[hint]
    return entry


@overload
def tool(fn: Callable[P, R]) -> Tool[P, R]: ...


@overload
def tool(
    fn: None = None,
    *,
    side_effect: SideEffect = "read",
    capability: str | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Callable[[Callable[P, R]], Tool[P, R]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    side_effect: SideEffect = "read",
    capability: str | None = None,
    name: str | None = None,
    description: str | None = None,
) -> Any:
    """Record every call of the decorated function (sync or async) as a tool call of the
    current run. ``side_effect="write"`` makes it write-ahead. ``.schema`` is its OpenAI tool
    schema, ``.tool_name`` the name the model sees (``name=``, default the function's)."""
    if side_effect not in ("read", "write"):
        raise ValueError(f"side_effect must be 'read' or 'write', not {side_effect!r}")

    def decorate(function: Callable[..., Any]) -> Any:
        tool_name = name or function.__name__
        recorder = _ToolRecorder(function, tool_name, side_effect)
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def acall(*args: Any, **kwargs: Any) -> Any:
                call = recorder.begin(args, kwargs)
                token = _KEY.set(call.key)
                try:
                    result = await function(*args, **kwargs)
                except BaseException as exc:
                    call.failed(exc)
                    raise
                finally:
                    _KEY.reset(token)
                call.succeeded(result)
                return result

            wrapper: Any = acall
        else:

            @functools.wraps(function)
            def scall(*args: Any, **kwargs: Any) -> Any:
                call = recorder.begin(args, kwargs)
                token = _KEY.set(call.key)
                try:
                    result = function(*args, **kwargs)
                except BaseException as exc:
                    call.failed(exc)
                    raise
                finally:
                    _KEY.reset(token)
                call.succeeded(result)
                return result

            wrapper = scall
        wrapper.schema = function_schema(function, tool_name, description)
        wrapper.tool_name = tool_name
        wrapper.side_effect = side_effect
        wrapper.capability = capability
        with _REGISTRY_LOCK:
            _REGISTRY[tool_name] = {"side_effect": side_effect, "capability": capability}
        return wrapper

    return decorate(fn) if fn is not None else decorate


class _ToolRecorder:
    def __init__(self, fn: Callable[..., Any], name: str, side_effect: SideEffect) -> None:
        self.name = name
        self.write = side_effect == "write"
        self.signature = inspect.signature(fn)

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as passed (defaults not filled in: the model did not send them)."""
        try:
            bound = self.signature.bind_partial(*args, **kwargs).arguments
        except TypeError:
            bound = {**{str(i): a for i, a in enumerate(args)}, **kwargs}
        flat: dict[str, Any] = {}
        for key, value in bound.items():
            param = self.signature.parameters.get(key)
            if param is not None and param.kind is param.VAR_KEYWORD:
                flat.update(value)
            elif param is not None and param.kind is param.VAR_POSITIONAL:
                flat[key] = list(value)
            else:
                flat[key] = value
        return json_safe(flat)

    def begin(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Call:
        run = current_run()
        try:
            arguments = self.arguments(args, kwargs)
            call_id = run.match_tool_call(self.name, arguments) if run else None
        except Exception as exc:
            if run is not None:
                report(run.config, f"tool {self.name!r}: arguments not recorded", exc)
            run, arguments, call_id = None, {}, None
        key = _key(run, call_id, self.name, arguments) if self.write else None
        call = _Call(self, run, arguments, call_id, key)
        if run is not None and self.write:
            call.intent()
        return call


def _key(run: Run | None, call_id: str | None, name: str, arguments: dict[str, Any]) -> str:
    """The run, the model's call id, the tool, its arguments, and how many times this same
    call came before in the run: the same intent gets the same key, a second identical write
    (the agent refunding twice on purpose) its own."""
    if run is None:
        return f"rbk-{uuid.uuid4().hex}"
    basis = json.dumps(
        [run.run_id, call_id or "", name, arguments], sort_keys=True, ensure_ascii=False
    )
    occurrence = run.count_intent(basis)
    digest = hashlib.sha256(f"{basis}#{occurrence}".encode()).hexdigest()
    return "rbk-" + digest[:40]


class _Call:
    def __init__(
        self,
        tool: _ToolRecorder,
        run: Run | None,
        arguments: dict[str, Any],
        call_id: str | None,
        key: str | None,
    ) -> None:
        self.tool, self.run, self.arguments, self.call_id, self.key = (
            tool,
            run,
            arguments,
            call_id,
            key,
        )
        self.intent_sequence = 0

    def intent(self) -> None:
        """Write-ahead: spooled and fsync'ed before the function runs."""
        assert self.run is not None
        event: dict[str, Any] = {
            "type": "tool_intent",
            "name": self.tool.name,
            "arguments": self.arguments,
            "idempotency_key": self.key,
        }
        if self.call_id:
            event["tool_call_id"] = self.call_id
        self.intent_sequence = self.run.emit(event, durable=True)

    def succeeded(self, result: Any) -> None:
        self._record(json_safe(result), "SUCCESS", "CONFIRMED")

    def failed(self, exc: BaseException) -> None:
        status = "FAILED" if isinstance(exc, WriteFailed) else "UNKNOWN"
        self._record(f"{type(exc).__name__}: {exc}", "ERROR", status)

    def _record(self, output: Any, outcome: str, status: str) -> None:
        run = self.run
        if run is None or not run.active:
            return
        try:
            if self.tool.write:
                if not self.intent_sequence:
                    return  # the intent could not be spooled: the run is no longer recorded
                event: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_call_sequence": self.intent_sequence,
                    "name": self.tool.name,
                    "arguments": self.arguments,
                    "output": output,
                    "outcome": outcome,
                    "side_effect_status": status,
                }
            else:
                event = {
                    "type": "tool_call",
                    "name": self.tool.name,
                    "arguments": self.arguments,
                    "output": output,
                    "outcome": outcome,
                    "side_effect_class": "READ",
                }
            if self.call_id:
                event["tool_call_id"] = self.call_id
            run.emit(event, urgent=self.tool.write)
        except Exception as exc:
            report(run.config, f"tool {self.tool.name!r}: result not recorded", exc)
