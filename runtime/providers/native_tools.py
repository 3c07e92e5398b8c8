"""Native tool calls over an endpoint whose chat template drops ``tools``: the chat-completions
body a framework sends (``tools`` in the request, ``tool_calls`` expected back) translated into
the ``prompt`` form, and the answer translated back into an OpenAI completion or its SSE chunks.

The translation is the one Replaybook's own provider uses in ``tool_calling: "prompt"`` mode,
not a second copy: the request goes through ``wire.request_body`` (``prompt_tools.
compile_request``: the tools block in the system message, the JSON-schema ``response_format``)
and the answer through ``prompt_tools.decode_answer``. ``devstack.tool_front`` serves it in
front of the local ``llama_cpp.server``.

What a body keeps: every field the server reads (sampling, ``max_tokens``, ``seed``, ``stop``…)
passes as sent; ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the streaming fields are
consumed here (the server is always asked for one whole answer: the tool call is decoded from
the complete JSON, then streamed back in chunks when the caller asked for a stream).
``tool_choice: "none"`` and a caller's own ``response_format`` leave the body unchanged (as
``request_body`` does); a named function narrows the offer to it; ``"required"`` is served as
``"auto"`` (the answer schema always allows a reply).

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from models.canonical import canonical_hash
from models.errors import InvalidInputError
from models.model_call import ChatMessage, ModelRequest, ToolCallRequest, ToolSchema
from runtime.providers.prompt_tools import decode_answer
from runtime.providers.wire import request_body

#: the body's fields this translation consumes (everything else is forwarded as sent)
CONSUMED = (
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "stream",
    "stream_options",
    "functions",
    "function_call",
    "max_completion_tokens",
)
#: how an answer decoded: a call of an offered tool, a reply, or neither (kept as raw content)
AnswerKind = Literal["tool_call", "content", "unparsed"]


@dataclass(frozen=True)
class Translation:
    """A native-tools request in ``prompt`` form."""

    #: the body sent to the server (never streaming)
    upstream: dict[str, Any]
    #: the tools offered (what the answer may call)
    tools: tuple[ToolSchema, ...]
    stream: bool
    include_usage: bool


def translate_request(body: Mapping[str, Any]) -> Translation | None:
    """The ``prompt``-form request for ``body``, or None when it is to be sent unchanged (no
    tools, ``tool_choice: "none"``, or the caller's own ``response_format``).
    ``InvalidInputError`` names the field of a body that cannot be read."""
    tools_wire = body.get("tools")
    if not tools_wire or body.get("tool_choice") == "none" or body.get("response_format"):
        return None
    tools = _chosen(_tools(tools_wire), body.get("tool_choice"))
    model = body.get("model")
    try:
        request = ModelRequest(
            model=model if isinstance(model, str) else "",
            messages=_messages(body.get("messages")),
            tools=tools,
        )
    except ValidationError as exc:
        raise InvalidInputError(f"the request is not readable: {exc}", field="messages") from None
    compiled, _ = request_body(request, model=request.model, tool_calling="prompt")
    upstream = {k: v for k, v in body.items() if k not in CONSUMED}
    if "max_tokens" not in upstream and body.get("max_completion_tokens") is not None:
        upstream["max_tokens"] = body["max_completion_tokens"]
    upstream |= {"messages": compiled["messages"], "response_format": compiled["response_format"]}
    options = body.get("stream_options")
    return Translation(
        upstream=upstream,
        tools=tools,
        stream=bool(body.get("stream")),
        include_usage=isinstance(options, Mapping) and bool(options.get("include_usage")),
    )


def _tools(wire: Any) -> tuple[ToolSchema, ...]:
    if not isinstance(wire, list):
        raise InvalidInputError("must be a list of tools", field="tools")
    tools = []
    for index, tool in enumerate(wire):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidInputError(
                "must be a function tool with a name", field=f"tools[{index}].function.name"
            )
        try:
            tools.append(
                ToolSchema(
                    name=function["name"],
                    description=function.get("description") or "",
                    parameters=function.get("parameters") or {"type": "object", "properties": {}},
                )
            )
        except ValidationError as exc:
            raise InvalidInputError(
                f"is not a JSON schema object: {exc}", field=f"tools[{index}].function.parameters"
            ) from None
    return tuple(tools)


def _chosen(tools: tuple[ToolSchema, ...], choice: Any) -> tuple[ToolSchema, ...]:
    """The tools on offer: a named function narrows to it (one the request does not offer is
    refused, as OpenAI's API does)."""
    if not isinstance(choice, Mapping):
        return tools
    name = (choice.get("function") or {}).get("name")
    narrowed = tuple(t for t in tools if t.name == name)
    if not narrowed:
        raise InvalidInputError(
            f"names {name!r}, which is not among the tools", field="tool_choice.function.name"
        )
    return narrowed


def _messages(wire: Any) -> tuple[ChatMessage, ...]:
    if not isinstance(wire, list) or not wire:
        raise InvalidInputError("must be a non-empty list of messages", field="messages")
    names: dict[str, str] = {}  # tool call id → tool name, for the results' ``name``
    out = []
    for index, message in enumerate(wire):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise InvalidInputError("must be a message with a role", field=f"messages[{index}]")
        where = f"messages[{index}]"
        calls = tuple(
            _call(call, f"{where}.tool_calls[{n}]")
            for n, call in enumerate(message.get("tool_calls") or ())
        )
        names |= {c.id: c.name for c in calls}
        role = "system" if message["role"] == "developer" else message["role"]
        call_id = message.get("tool_call_id")
        name = message.get("name") or (names.get(call_id) if isinstance(call_id, str) else None)
        out.append(
            ChatMessage(
                role=role,
                content=_text(message.get("content"), f"{where}.content"),
                tool_calls=calls,
                tool_call_id=call_id,
                name=name,
            )
        )
    return tuple(out)


def _text(content: Any, field: str) -> str | None:
    """A message's text: a string, or the text parts of a content list joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        if all(isinstance(p, str) for p in parts) and len(parts) == len(content):
            return "".join(p for p in parts if isinstance(p, str))
    raise InvalidInputError("must be a string or a list of text parts", field=field)


def _call(call: Any, field: str) -> ToolCallRequest:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InvalidInputError("must be a function call with a name", field=field)
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        raise InvalidInputError("is not JSON", field=f"{field}.function.arguments") from None
    if not isinstance(arguments, dict):
        raise InvalidInputError("is not a JSON object", field=f"{field}.function.arguments")
    return ToolCallRequest(id=str(call.get("id") or ""), name=function["name"], arguments=arguments)


def answer_completion(
    upstream: Mapping[str, Any], tools: tuple[ToolSchema, ...]
) -> tuple[dict[str, Any], AnswerKind]:
    """The OpenAI completion for the server's ``prompt``-form answer, and how it decoded. An
    answer that is neither form stays content, as it came (never guessed at)."""
    completion = dict(upstream)
    choices = completion.get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return completion, "unparsed"
    choice = dict(choices[0])
    raw = (choice.get("message") or {}).get("content")
    key = str(completion.get("id") or canonical_hash(raw or ""))
    content, calls = decode_answer(raw, tools, key)
    kind: AnswerKind = "tool_call" if calls else ("content" if content != raw else "unparsed")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in calls
        ]
        choice["finish_reason"] = "tool_calls"
    choice["message"] = message
    completion["choices"] = [choice, *choices[1:]]
    return completion, kind


def completion_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """``completion`` as the server-sent events of a stream: the role, the reply or each tool
    call whole (id, name and arguments in one delta), the finish reason, the usage when asked
    (``stream_options.include_usage``: ``usage: null`` on every chunk, then a chunk with no
    choices), and ``[DONE]``."""
    head = {
        "id": completion.get("id") or "chatcmpl-front",
        "object": "chat.completion.chunk",
        # the server's own stamp (llama.cpp always sets it); translation reads no clock
        "created": completion.get("created") or 0,
        "model": completion.get("model"),
    }
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    if message.get("content"):
        deltas.append({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or ()):
        deltas.append({"tool_calls": [{"index": index, **call}]})
    chunks = [_choice_chunk(head, delta, None) for delta in deltas]
    chunks.append(_choice_chunk(head, {}, choice.get("finish_reason") or "stop"))
    if include_usage:
        chunks = [c | {"usage": None} for c in chunks]
        chunks.append(head | {"choices": [], "usage": completion.get("usage")})
    events = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks]
    return [*events, b"data: [DONE]\n\n"]


def _choice_chunk(
    head: dict[str, Any], delta: dict[str, Any], finish: str | None
) -> dict[str, Any]:
    return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
