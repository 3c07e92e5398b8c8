"""Tools offered in the prompt, for models whose chat template does not render ``tools``
(``tool_calling: "prompt"`` in the model registry).

The two local models (SmolLM2, Gemma 3) are served with their own chat templates, which
ignore the request's ``tools``: the model never sees them (``prompt_tokens`` is the same with
and without). In ``prompt`` mode the provider instead

* appends the tools (name, description, JSON-schema parameters) to the system message, in a
  block between ``TOOLS_BEGIN`` and ``TOOLS_END`` with one neutral instruction on how to
  answer (``INSTRUCTION``, unchanged for any model or task: never tuned for a wanted result);
* sends a ``response_format`` JSON schema allowing exactly ``{"tool_call": {"name": <one of
  the tool names>, "arguments": <that tool's arguments>}}`` or ``{"content": "<text>"}`` (one
  alternative per tool; the server constrains its output to it, so the answer is always well
  formed for the tool the model picks);
* converts the answer back into the usual content / tool_calls shape (``decode_answer``).

Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from models.canonical import canonical_hash
from models.model_call import ChatMessage, ModelRequest, ToolCallRequest, ToolSchema

ToolCalling = Literal["native", "prompt"]

TOOLS_BEGIN = "<tools>"
TOOLS_END = "</tools>"
#: the one instruction of the block (documented in the README; kept neutral on purpose)
INSTRUCTION = (
    "Answer with a JSON object: either "
    '{"tool_call": {"name": <tool name>, "arguments": {...}}} to call one of these tools, '
    'or {"content": <text>} to reply to the user.'
)


def render_tools(tools: tuple[ToolSchema, ...]) -> str:
    """The tools block appended to the system message."""
    lines = [TOOLS_BEGIN]
    for tool in tools:
        lines.append(
            json.dumps(
                {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
                ensure_ascii=False,
                sort_keys=True,
            )
        )
    lines.append(TOOLS_END)
    lines.append(INSTRUCTION)
    return "\n".join(lines)


def answer_schema(tools: tuple[ToolSchema, ...]) -> dict[str, Any]:
    """The OpenAI ``response_format``: a call of one of ``tools`` with that tool's own arguments
    (one alternative per tool: its ``name`` a constant, its ``arguments`` the tool's parameter
    schema), or content. llama.cpp turns it into a grammar, so the arguments of the tool the
    model picks are well formed for that tool (required keys present, values of their type,
    enums respected, no undeclared key)."""
    definitions: dict[str, Any] = {}
    calls = [
        _closed(
            {
                "tool_call": _closed(
                    {
                        "name": {"const": tool.name},
                        "arguments": _arguments_schema(tool, index, definitions),
                    }
                )
            }
        )
        for index, tool in enumerate(tools)
    ]
    content = _closed({"content": {"type": "string"}})
    schema: dict[str, Any] = {"anyOf": [*calls, content]}
    if definitions:
        schema["$defs"] = definitions
    # llama.cpp's server reads ``schema`` (and refuses the type ``json_schema``); OpenAI's API
    # reads ``json_schema``: both are sent, as ``examples.support_desk.real_model`` does
    return {
        "type": "json_object",
        "schema": schema,
        "json_schema": {"name": "answer", "schema": schema},
    }


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    """An object with exactly these keys (all required, none other)."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _arguments_schema(tool: ToolSchema, index: int, definitions: dict[str, Any]) -> Any:
    """The tool's parameter schema, its local definitions (``#/$defs/…``, ``#/definitions/…``)
    moved to the answer schema's ``$defs`` under names of their own (``t<index>_<name>``: two
    tools may both define ``Passenger``), references rewritten. A schema that is not an object
    schema, or that refers elsewhere, leaves the arguments any object (never a guess)."""
    parameters: Any = tool.parameters
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        return {"type": "object"}
    prefix = f"t{index}_"
    local: dict[str, Any] = {}
    for key in ("definitions", "$defs"):
        if isinstance(found := parameters.get(key), dict):
            local.update(found)

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(n) for n in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("$defs", "definitions"):
                continue
            if key == "$ref":
                name = _local_name(value)
                if name is None or name not in local:
                    raise _Unsupported(value)
                out[key] = f"#/$defs/{prefix}{name}"
            else:
                out[key] = rewrite(value)
        return out

    try:
        arguments = rewrite(parameters)
        moved = {f"{prefix}{name}": rewrite(value) for name, value in local.items()}
    except _Unsupported:
        return {"type": "object"}
    definitions.update(moved)
    # llama.cpp's grammar allows no undeclared key where a schema does not say; said here,
    # so that the schema means what the grammar enforces (and a validator agrees with it)
    arguments.setdefault("additionalProperties", False)
    return arguments


class _Unsupported(Exception):
    """A reference that is not to one of the schema's own definitions."""


def _local_name(ref: Any) -> str | None:
    for root in ("#/$defs/", "#/definitions/"):
        if isinstance(ref, str) and ref.startswith(root) and "/" not in ref[len(root) :]:
            return ref[len(root) :]
    return None


def compile_request(request: ModelRequest) -> tuple[ModelRequest, dict[str, Any] | None]:
    """The request as sent in ``prompt`` mode (tools in the system message, none in ``tools``)
    and its ``response_format``; a request without tools is sent as it is."""
    if not request.tools:
        return request, None
    block = render_tools(request.tools)
    messages = [_in_answer_form(m) for m in request.messages]
    if messages and messages[0].role == "system":
        first = messages[0]
        text = f"{first.content}\n\n{block}" if first.content else block
        messages[0] = first.model_copy(update={"content": text})
    else:
        messages.insert(0, ChatMessage(role="system", content=block))
    compiled = request.model_copy(update={"messages": tuple(messages), "tools": ()})
    return compiled, answer_schema(request.tools)


def _in_answer_form(message: ChatMessage) -> ChatMessage:
    """The conversation's earlier tool calls and results, in the form the model answers in:
    an assistant tool call as its ``{"tool_call": …}`` text, a tool result as a user message
    ``{"tool_result": {"name": …, "content": …}}`` (these templates know neither, and some
    require user and assistant turns to alternate; llama.cpp's server refuses an assistant
    message without content)."""
    if message.role == "assistant" and message.tool_calls:
        calls = [
            json.dumps({"tool_call": {"name": c.name, "arguments": c.arguments}}, sort_keys=True)
            for c in message.tool_calls
        ]
        text = "\n".join(([message.content] if message.content else []) + calls)
        return ChatMessage(role="assistant", content=text)
    if message.role == "tool":
        result = {"tool_result": {"name": message.name, "content": message.content or ""}}
        return ChatMessage(role="user", content=json.dumps(result, ensure_ascii=False))
    return message


def decode_answer(
    content: str | None, tools: tuple[ToolSchema, ...], call_key: str
) -> tuple[str | None, tuple[ToolCallRequest, ...]]:
    """The (content, tool_calls) of a ``prompt``-mode answer. An answer that is not one of the
    two forms (a server that ignored the schema, or a cut-off answer) is kept as content, not
    guessed at. ``call_key``: what makes the call id unique (e.g. the response id)."""
    try:
        value = json.loads(content or "")
    except ValueError:
        return content, ()
    if not isinstance(value, dict):
        return content, ()
    call = value.get("tool_call")
    if isinstance(call, dict):
        name, arguments = call.get("name"), call.get("arguments", {})
        if name in {t.name for t in tools} and isinstance(arguments, dict):
            call_id = "call_" + canonical_hash([call_key, name, arguments])[-16:]
            return None, (ToolCallRequest(id=call_id, name=name, arguments=arguments),)
    if set(value) == {"content"} and isinstance(value["content"], str):
        return value["content"], ()
    return content, ()
