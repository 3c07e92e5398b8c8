"""The chat-completions body sent for a ``ModelRequest``: one function for the provider that
sends it (``OpenAICompatibleProvider``) and for a sandboxed replay step that only records it
(``activities.sandbox.proxies.ProxyModel``: its model calls go through the worker, but the body
it records must be the one the worker's provider sends).

Pure: no I/O (no ``openai`` import either: the sandboxed child imports this).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from models.model_call import ChatMessage, ModelRequest
from runtime.providers.capabilities import ChatCompletionsProvider, compiling_provider
from runtime.providers.prompt_tools import ToolCalling, compile_request


def request_body(
    request: ModelRequest,
    *,
    model: str,
    tool_calling: ToolCalling,
    response_format: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The body sent for ``request`` to the endpoint's ``model``, and whether the tools were
    offered in the prompt (``tool_calling: "prompt"``: the answer is then decoded by
    ``prompt_tools.decode_answer``). A caller's own ``response_format`` wins over prompting."""
    prompted = tool_calling == "prompt" and bool(request.tools) and response_format is None
    if prompted:
        request, response_format = compile_request(request)
    # The configured model is sent, not ``request.model``: a replay against another endpoint
    # keeps the agent's requests unchanged, and the profile names what actually answered.
    body: dict[str, Any] = {
        "model": model,
        "messages": [wire_message(m) for m in request.messages],
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    for name in ("temperature", "max_tokens", "seed"):
        if (value := getattr(request, name)) is not None:
            body[name] = value
    if response_format is not None:
        body["response_format"] = dict(response_format)
    return body, prompted


def wire_message(message: ChatMessage) -> dict[str, Any]:
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in message.tool_calls
        ]
    if message.role == "tool":
        wire["tool_call_id"] = message.tool_call_id
        wire["content"] = message.content or ""  # the API requires a string for tool results
    if message.name is not None:
        wire["name"] = message.name
    return wire


def wire_settings(provider: object) -> dict[str, str] | None:
    """What ``request_body`` needs of ``provider`` (its model id and ``tool_calling``), looking
    through wrappers by their ``inner``; None for a provider that sends no chat-completions
    body (a scripted model)."""
    compiling = compiling_provider(provider)
    if not isinstance(compiling, ChatCompletionsProvider):
        return None  # a sandboxed step's ProxyModel compiles, but names no endpoint's model
    # a protocol check at run time sees the names only: their values are checked here
    model, tool_calling = compiling.model, compiling.tool_calling
    if not isinstance(model, str) or tool_calling not in ("native", "prompt"):
        return None
    return {"model_id": model, "tool_calling": str(tool_calling)}
