"""Tools offered in the prompt, for models whose chat template does not render ``tools``
(``tool_calling: "prompt"`` in the model registry).

The two local models (SmolLM2, Gemma 3) are served with their own chat templates, which
ignore the request's ``tools``: the model never sees them (``prompt_tokens`` is the same with
and without). In ``prompt`` mode the provider instead

* appends the tools (name, description, JSON-schema parameters) to the system message, in a
  block between ``TOOLS_BEGIN`` and ``TOOLS_END`` with one neutral instruction on how to
  answer (``INSTRUCTION``, unchanged for any model or task: never tuned for a wanted result);
* sends a ``response_format`` JSON schema allowing exactly ``{"tool_call": {"name": <one of
  the tool names>, "arguments": {...}}}`` or ``{"content": "<text>"}`` (the server constrains
  its output to it, so the answer is always well formed);
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
    """The OpenAI ``response_format``: a tool call naming one of ``tools``, or content."""
    tool_call = {
        "type": "object",
        "properties": {
            "tool_call": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": [t.name for t in tools]},
                    "arguments": {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        },
        "required": ["tool_call"],
        "additionalProperties": False,
    }
    content = {
        "type": "object",
        "properties": {"content": {"type": "string"}},
        "required": ["content"],
        "additionalProperties": False,
    }
    schema = {"anyOf": [tool_call, content]}
    # llama.cpp's server reads ``schema`` (and refuses the type ``json_schema``); OpenAI's API
    # reads ``json_schema``: both are sent, as ``examples.support_desk.real_model`` does
    return {
        "type": "json_object",
        "schema": schema,
        "json_schema": {"name": "answer", "schema": schema},
    }


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
