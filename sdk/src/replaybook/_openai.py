"""``replaybook.wrap(client)``: record the model calls of an ``openai.OpenAI`` or
``openai.AsyncOpenAI`` client. ``chat.completions.create`` and ``responses.create`` are
replaced on the client object itself (it stays the same object, of the same class, for the
frameworks that check), and each call becomes a ``model_call`` event: the compiled messages,
the tools, the sampling parameters and seed, the answer with its tool calls, usage, latency.
A streamed call gives the caller its stream unchanged; the answer is assembled from the chunks
and recorded when the stream ends (or is closed)."""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from replaybook._config import report
from replaybook._jsonsafe import json_safe
from replaybook._run import Run, current_run, elapsed_ms
from replaybook._streams import AsyncRecordedStream, RecordedStream

C = TypeVar("C")
#: request parameters kept as the call's ``parameters`` (the messages, tools and model are
#: recorded as such)
_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "reasoning",
    "text",
    "stream",
    "user",
)


def wrap(client: C) -> C:
    """Record this client's model calls into the current run; returns the same client."""
    if getattr(client, "_replaybook_wrapped", False):
        return client
    chat = getattr(getattr(client, "chat", None), "completions", None)
    if chat is not None and hasattr(chat, "create"):
        chat.create = _wrapped(chat.create, _ChatRecording)
    responses = getattr(client, "responses", None)
    if responses is not None and hasattr(responses, "create"):
        responses.create = _wrapped(responses.create, _ResponsesRecording)
    client._replaybook_wrapped = True  # type: ignore[attr-defined]
    return client


def _wrapped(create: Callable[..., Any], kind: type[_Recording]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(create):

        @functools.wraps(create)
        async def acreate(*args: Any, **kwargs: Any) -> Any:
            run = current_run()
            if run is None:
                return await create(*args, **kwargs)
            recording = kind(run, kwargs)
            result = await create(*args, **kwargs)
            return recording.returned(result, is_async=True)

        return acreate

    @functools.wraps(create)
    def screate(*args: Any, **kwargs: Any) -> Any:
        run = current_run()
        if run is None:
            return create(*args, **kwargs)
        recording = kind(run, kwargs)
        result = create(*args, **kwargs)
        if inspect.isawaitable(result):
            # AsyncOpenAI's ``create`` is a plain function returning a coroutine (openai's
            # ``required_args`` wrapper hides ``async def``): record what it resolves to
            return _resolved(result, recording)
        return recording.returned(result, is_async=False)

    return screate


async def _resolved(pending: Any, recording: _Recording) -> Any:
    return recording.returned(await pending, is_async=True)


def _given(value: Any) -> bool:
    """Not None, nor openai's "not given" sentinels (``omit``, ``NOT_GIVEN``), which frameworks
    such as the OpenAI Agents SDK pass for every parameter they leave unset."""
    return value is not None and type(value).__name__ not in ("Omit", "NotGiven")


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if type(obj) is dict:  # the common case first: the abstract Mapping check is slow
        return obj.get(name, default)
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _arguments(text: Any) -> dict[str, Any]:
    if isinstance(text, Mapping):
        return json_safe(dict(text))
    try:
        value = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {"_unparsed_arguments": str(text)}
    return json_safe(value) if isinstance(value, dict) else {"_value": json_safe(value)}


def _text(content: Any) -> str | None:
    """Message content as text: parts are joined (non-text parts named)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            kind = _get(part, "type")
            text = _get(part, "text")
            parts.append(text if isinstance(text, str) else f"[{kind or 'part'}]")
        return "".join(parts)
    return str(content)


def chat_message(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"role": str(_get(message, "role") or "user")}
    out["content"] = _text(_get(message, "content"))
    calls = _get(message, "tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": str(_get(c, "id") or ""),
                "name": str(_get(_get(c, "function"), "name") or ""),
                "arguments": _arguments(_get(_get(c, "function"), "arguments")),
            }
            for c in calls
        ]
    for key in ("tool_call_id", "name"):
        value = _get(message, key)
        if value is not None:
            out[key] = str(value)
    return out


class _Recording:
    """One model call being recorded."""

    def __init__(self, run: Run, kwargs: Mapping[str, Any]) -> None:
        self.run = run
        self.kwargs = kwargs
        self.started = time.perf_counter()

    def returned(self, result: Any, is_async: bool) -> Any:
        if self.kwargs.get("stream"):
            return (AsyncRecordedStream if is_async else RecordedStream)(result, self)
        self.record(result)
        return result

    def record(self, response: Any) -> None:
        try:
            event = self.event(response)
            event["latency_ms"] = elapsed_ms(self.started)
            calls = [(c["id"], c["name"], c["arguments"]) for c in event["tool_calls"]]
            self.run.note_tool_calls(calls)
            self.run.emit(event, request_tools=list(self.kwargs.get("tools") or []) or None)
        except Exception as exc:
            report(self.run.config, "a model call was not recorded", exc)

    def base(self) -> dict[str, Any]:
        kwargs = self.kwargs
        params = {k: json_safe(kwargs[k]) for k in _PARAMS if _given(kwargs.get(k))}
        event: dict[str, Any] = {"type": "model_call", "parameters": params}
        if isinstance(kwargs.get("seed"), int):
            event["seed"] = kwargs["seed"]
        return event

    def strip_system(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The run's system prompt is the header's; the messages are what comes after it."""
        if (
            messages
            and messages[0]["role"] in ("system", "developer")
            and self.run.system_prompt is not None
            and messages[0]["content"] == self.run.system_prompt
        ):
            return messages[1:]
        return messages

    def event(self, response: Any) -> dict[str, Any]:
        raise NotImplementedError

    # streaming: the subclasses assemble the answer from the chunks
    def chunk(self, chunk: Any) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        raise NotImplementedError


class _ChatRecording(_Recording):
    def __init__(self, run: Run, kwargs: Mapping[str, Any]) -> None:
        super().__init__(run, kwargs)
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.response_id: str | None = None
        self.usage: Any = None

    def event(self, response: Any) -> dict[str, Any]:
        choices = _get(response, "choices") or []
        message = _get(choices[0], "message") if choices else None
        answer = chat_message(message) if message is not None else {"content": None}
        return self._event(
            answer.get("content"),
            answer.get("tool_calls") or [],
            _get(choices[0], "finish_reason") if choices else None,
            _get(response, "model"),
            _get(response, "id"),
            _get(response, "usage"),
        )

    def _event(
        self,
        content: str | None,
        tool_calls: list[dict[str, Any]],
        finish_reason: str | None,
        model: str | None,
        response_id: str | None,
        usage: Any,
    ) -> dict[str, Any]:
        event = self.base()
        messages = [chat_message(m) for m in self.kwargs.get("messages") or []]
        event.update(
            model=str(model or self.kwargs.get("model") or "unknown"),
            messages=self.strip_system(messages),
            content=content,
            tool_calls=tool_calls,
            finish_reason=finish_reason,
            response_id=response_id,
        )
        if usage is not None:
            event["usage"] = {
                "prompt_tokens": int(_get(usage, "prompt_tokens") or 0),
                "completion_tokens": int(_get(usage, "completion_tokens") or 0),
            }
        return event

    def chunk(self, chunk: Any) -> None:
        self.model = self.model or _get(chunk, "model")
        self.response_id = self.response_id or _get(chunk, "id")
        if _get(chunk, "usage") is not None:
            self.usage = _get(chunk, "usage")
        for choice in _get(chunk, "choices") or []:
            if (_get(choice, "index") or 0) != 0:
                continue
            delta = _get(choice, "delta")
            if _get(choice, "finish_reason"):
                self.finish_reason = _get(choice, "finish_reason")
            if delta is None:
                continue
            text = _get(delta, "content")
            if text:
                self.content.append(text)
            for call in _get(delta, "tool_calls") or []:
                slot = self.calls.setdefault(
                    _get(call, "index") or 0, {"id": "", "name": "", "arguments": ""}
                )
                slot["id"] = _get(call, "id") or slot["id"]
                function = _get(call, "function")
                if function is not None:
                    slot["name"] += _get(function, "name") or ""
                    slot["arguments"] += _get(function, "arguments") or ""

    def finish(self) -> None:
        calls = [
            {"id": c["id"], "name": c["name"], "arguments": _arguments(c["arguments"])}
            for _, c in sorted(self.calls.items())
        ]
        try:
            event = self._event(
                "".join(self.content) if self.content else None,
                calls,
                self.finish_reason,
                self.model,
                self.response_id,
                self.usage,
            )
            event["latency_ms"] = elapsed_ms(self.started)
            self.run.note_tool_calls([(c["id"], c["name"], c["arguments"]) for c in calls])
            self.run.emit(event, request_tools=list(self.kwargs.get("tools") or []) or None)
        except Exception as exc:
            report(self.run.config, "a streamed model call was not recorded", exc)


class _ResponsesRecording(_Recording):
    """``responses.create``: ``instructions`` + ``input`` items as messages, the output items
    as the answer (text and function calls)."""

    def __init__(self, run: Run, kwargs: Mapping[str, Any]) -> None:
        super().__init__(run, kwargs)
        self.final: Any = None

    def messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        instructions = self.kwargs.get("instructions")
        if instructions:
            messages.append({"role": "system", "content": str(instructions)})
        given = self.kwargs.get("input")
        if isinstance(given, str):
            return [*messages, {"role": "user", "content": given}]
        for item in given or []:
            kind = _get(item, "type")
            if kind == "function_call":
                messages.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": str(_get(item, "call_id") or ""),
                                "name": str(_get(item, "name") or ""),
                                "arguments": _arguments(_get(item, "arguments")),
                            }
                        ],
                    }
                )
            elif kind == "function_call_output":
                messages.append(
                    {
                        "role": "tool",
                        "content": _text(_get(item, "output")),
                        "tool_call_id": str(_get(item, "call_id") or ""),
                    }
                )
            else:
                messages.append(
                    {
                        "role": str(_get(item, "role") or "user"),
                        "content": _text(_get(item, "content")),
                    }
                )
        return messages

    def event(self, response: Any) -> dict[str, Any]:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        for item in _get(response, "output") or []:
            kind = _get(item, "type")
            if kind == "message":
                for part in _get(item, "content") or []:
                    if isinstance(_get(part, "text"), str):
                        texts.append(_get(part, "text"))
            elif kind == "function_call":
                calls.append(
                    {
                        "id": str(_get(item, "call_id") or _get(item, "id") or ""),
                        "name": str(_get(item, "name") or ""),
                        "arguments": _arguments(_get(item, "arguments")),
                    }
                )
        event = self.base()
        event.update(
            model=str(_get(response, "model") or self.kwargs.get("model") or "unknown"),
            messages=self.strip_system(self.messages()),
            content="".join(texts) if texts else None,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else str(_get(response, "status") or "stop"),
            response_id=_get(response, "id"),
        )
        usage = _get(response, "usage")
        if usage is not None:
            event["usage"] = {
                "prompt_tokens": int(_get(usage, "input_tokens") or 0),
                "completion_tokens": int(_get(usage, "output_tokens") or 0),
            }
        return event

    def chunk(self, chunk: Any) -> None:
        if _get(chunk, "type") in ("response.completed", "response.incomplete", "response.failed"):
            self.final = _get(chunk, "response")

    def finish(self) -> None:
        if self.final is not None:
            self.record(self.final)
