"""The translation between native tool calls and the ``prompt`` form (pure code, no server):
the body sent upstream is the provider's own ``prompt``-mode body, and answers come back as
OpenAI ``tool_calls`` (JSON or SSE chunks)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models.errors import InvalidInputError
from models.model_call import ChatMessage, ModelRequest, ToolSchema
from runtime.providers.native_tools import answer_completion, completion_chunks, translate_request
from runtime.providers.prompt_tools import TOOLS_BEGIN
from runtime.providers.wire import request_body

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}
REFUND = {
    "type": "function",
    "function": {
        "name": "refund",
        "parameters": {"type": "object", "properties": {"amount": {"type": "number"}}},
    },
}


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "model": "smollm2-135m",
        "messages": [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": [{"type": "text", "text": "Refund order A-1"}]},
        ],
        "tools": [LOOKUP, REFUND],
        "temperature": 0,
        "max_completion_tokens": 64,
    } | extra


def test_a_body_with_tools_becomes_the_providers_own_prompt_form() -> None:
    translation = translate_request(_body(stream=True, stream_options={"include_usage": True}))
    assert translation is not None and translation.stream and translation.include_usage
    upstream = translation.upstream
    assert "tools" not in upstream and "stream" not in upstream
    assert upstream["max_tokens"] == 64 and upstream["temperature"] == 0
    # exactly what Replaybook's provider sends in prompt mode for the same request
    request = ModelRequest(
        model="smollm2-135m",
        messages=(
            ChatMessage(role="system", content="You are a support agent."),
            ChatMessage(role="user", content="Refund order A-1"),
        ),
        tools=translation.tools,
    )
    expected, prompted = request_body(request, model="smollm2-135m", tool_calling="prompt")
    assert prompted
    assert upstream["messages"] == expected["messages"]
    assert upstream["response_format"] == expected["response_format"]
    assert TOOLS_BEGIN in upstream["messages"][0]["content"]


def test_earlier_calls_and_results_are_sent_in_answer_form_with_the_tools_name() -> None:
    history = [
        {"role": "user", "content": "Refund order A-1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"amount": 5}'},
    ]
    translation = translate_request(_body(messages=history))
    assert translation is not None
    sent = translation.upstream["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert json.loads(sent[2]["content"]) == {
        "tool_call": {"name": "lookup_order", "arguments": {"order_id": "A-1"}}
    }
    assert json.loads(sent[3]["content"])["tool_result"]["name"] == "lookup_order"


@pytest.mark.parametrize(
    "extra",
    [{"tools": []}, {"tool_choice": "none"}, {"response_format": {"type": "json_object"}}],
)
def test_bodies_the_front_leaves_unchanged(extra: dict[str, Any]) -> None:
    assert translate_request(_body(**extra)) is None


def test_a_named_function_narrows_the_offer_and_an_unknown_one_is_refused() -> None:
    choice = {"type": "function", "function": {"name": "refund"}}
    translation = translate_request(_body(tool_choice=choice))
    assert translation is not None
    assert [t.name for t in translation.tools] == ["refund"]
    with pytest.raises(InvalidInputError) as caught:
        translate_request(_body(tool_choice={"type": "function", "function": {"name": "x"}}))
    assert caught.value.field == "tool_choice.function.name"


def test_unreadable_arguments_name_their_field() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "refund", "arguments": "{"}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    with pytest.raises(InvalidInputError) as caught:
        translate_request(_body(messages=messages))
    assert caught.value.field == "messages[0].tool_calls[0].function.arguments"


def _upstream(content: str, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "smollm2-135m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


TOOLS = (ToolSchema(name="refund"), ToolSchema(name="lookup_order"))


def test_a_tool_call_answer_becomes_tool_calls() -> None:
    answer = json.dumps({"tool_call": {"name": "refund", "arguments": {"amount": 5}}})
    completion, kind = answer_completion(_upstream(answer), TOOLS)
    assert kind == "tool_call"
    choice = completion["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "refund", "arguments": '{"amount": 5}'}
    assert call["id"].startswith("call_")


@pytest.mark.parametrize(
    ("content", "kind", "text"),
    [
        ('{"content": "Done."}', "content", "Done."),
        ('{"tool_call": {"name": "refu', "unparsed", '{"tool_call": {"name": "refu'),
        ('{"tool_call": {"name": "delete", "arguments": {}}}', "unparsed", None),
    ],
)
def test_replies_and_unusable_answers_stay_content(content: str, kind: str, text: Any) -> None:
    completion, got = answer_completion(_upstream(content, "length"), TOOLS)
    assert got == kind
    message = completion["choices"][0]["message"]
    assert message["content"] == (text if text is not None else content)
    assert "tool_calls" not in message
    assert completion["choices"][0]["finish_reason"] == "length"


def test_the_stream_carries_the_call_whole_then_the_usage_then_done() -> None:
    answer = json.dumps({"tool_call": {"name": "refund", "arguments": {"amount": 5}}})
    completion, _ = answer_completion(_upstream(answer), TOOLS)
    events = completion_chunks(completion, include_usage=True)
    assert events[-1] == b"data: [DONE]\n\n"
    chunks = [json.loads(e.removeprefix(b"data: ")) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0]["role"] == "assistant"
    (call,) = deltas[1]["tool_calls"]
    assert call["index"] == 0 and call["function"]["name"] == "refund"
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15
    assert all(c["usage"] is None for c in chunks[:-1])
    without = completion_chunks(completion, include_usage=False)
    assert all(b'"usage"' not in e for e in without)
