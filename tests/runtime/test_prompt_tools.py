"""``tool_calling: "prompt"``: the tools rendered into the system message and the answer
constrained to a tool call or content, against the real local chat-completions test server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import jsonschema
import pytest

from models.model_call import ChatMessage, ModelRequest, ToolCallRequest, ToolSchema
from runtime.providers.openai_compat import OpenAICompatibleProvider
from runtime.providers.prompt_tools import INSTRUCTION, TOOLS_BEGIN, TOOLS_END
from runtime.providers.registry import ModelRegistrySettings
from tests.runtime.chat_server import ChatServer, text_answer

TOOLS = (
    ToolSchema(
        name="get_user_details",
        description="Get the details of a user.",
        parameters={
            "type": "object",
            "properties": {"user_id": {"type": "string"}},
            "required": ["user_id"],
        },
    ),
    ToolSchema(name="think", description="Think."),
)
REQUEST = ModelRequest(
    model="agent-model",
    messages=(
        ChatMessage(role="system", content="You are an airline agent."),
        ChatMessage(role="user", content="Hi, I am mia_li_3668."),
    ),
    tools=TOOLS,
    max_tokens=64,
)


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat_server:
        yield chat_server


@pytest.fixture
async def provider(server: ChatServer) -> AsyncIterator[OpenAICompatibleProvider]:
    made = OpenAICompatibleProvider(base_url=server.base_url, model="m", tool_calling="prompt")
    yield made
    await made.aclose()


async def test_the_request_carries_the_tools_in_the_system_message_and_a_schema(
    server: ChatServer, provider: OpenAICompatibleProvider
) -> None:
    server.script(text_answer('{"content": "Hello"}'))
    await provider.complete(REQUEST)
    (body,) = server.bodies
    assert "tools" not in body  # the template would drop them: they are in the prompt
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("You are an airline agent.\n\n" + TOOLS_BEGIN)
    block = system["content"].split(TOOLS_BEGIN)[1].split(TOOLS_END)[0]
    rendered = [json.loads(line) for line in block.strip().splitlines()]
    assert rendered == [
        {"name": t.name, "description": t.description, "parameters": t.parameters} for t in TOOLS
    ]
    assert system["content"].endswith(INSTRUCTION)
    assert body["messages"][1] == {"role": "user", "content": "Hi, I am mia_li_3668."}
    schema = body["response_format"]["schema"]
    assert body["response_format"]["json_schema"]["schema"] == schema
    # one alternative per offered tool (its own arguments: ``test_answer_schema``), then content
    names = [a["properties"]["tool_call"]["properties"]["name"] for a in schema["anyOf"][:-1]]
    assert names == [{"const": "get_user_details"}, {"const": "think"}]
    # exactly the two forms: a tool call naming an offered tool, or content
    jsonschema.validate({"tool_call": {"name": "think", "arguments": {}}}, schema)
    jsonschema.validate({"content": "text"}, schema)
    for wrong in (
        {"tool_call": {"name": "book_flight", "arguments": {}}},
        {"content": "text", "tool_call": {"name": "think", "arguments": {}}},
        {"answer": "text"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


async def test_both_answer_forms_come_back_in_the_usual_shape(
    server: ChatServer, provider: OpenAICompatibleProvider
) -> None:
    call = {"tool_call": {"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}}
    server.script(
        text_answer(json.dumps(call), prompt_tokens=900, completion_tokens=20),
        text_answer('{"content": "How can I help?"}'),
        text_answer("not JSON at all"),
    )
    called = await provider.complete(REQUEST)
    assert called.content is None
    (tool_call,) = called.tool_calls
    assert (tool_call.name, tool_call.arguments) == ("get_user_details", {"user_id": "mia_li_3668"})
    assert tool_call.id.startswith("call_")
    assert called.usage.prompt_tokens == 900
    answered = await provider.complete(REQUEST)
    assert (answered.content, answered.tool_calls) == ("How can I help?", ())
    # a server that ignored the schema: the text is kept as it is, not guessed at
    kept = await provider.complete(REQUEST)
    assert (kept.content, kept.tool_calls) == ("not JSON at all", ())


async def test_native_mode_and_requests_without_tools_are_sent_unchanged(
    server: ChatServer, provider: OpenAICompatibleProvider
) -> None:
    native = OpenAICompatibleProvider(base_url=server.base_url, model="m")
    try:
        server.script(text_answer("a"), text_answer('{"content": "b"}'))
        await native.complete(REQUEST)
        await provider.complete(REQUEST.model_copy(update={"tools": ()}))
    finally:
        await native.aclose()
    bodies: list[dict[str, Any]] = server.bodies
    with_tools, without = bodies
    assert [t["function"]["name"] for t in with_tools["tools"]] == ["get_user_details", "think"]
    assert "response_format" not in with_tools
    assert TOOLS_BEGIN not in with_tools["messages"][0]["content"]
    assert "response_format" not in without and "tools" not in without
    assert without["messages"][0]["content"] == "You are an airline agent."


async def test_earlier_tool_calls_and_results_are_sent_in_the_answer_form(
    server: ChatServer, provider: OpenAICompatibleProvider
) -> None:
    call = ToolCallRequest(id="call_1", name="get_user_details", arguments={"user_id": "u"})
    conversation = REQUEST.model_copy(
        update={
            "messages": (
                *REQUEST.messages,
                ChatMessage(role="assistant", content=None, tool_calls=(call,)),
                ChatMessage(
                    role="tool", content='{"name": "Mia"}', tool_call_id="call_1", name=call.name
                ),
            )
        }
    )
    server.script(text_answer('{"content": "Hello Mia"}'))
    await provider.complete(conversation)
    (body,) = server.bodies
    assert body["messages"][2] == {
        "role": "assistant",
        "content": '{"tool_call": {"arguments": {"user_id": "u"}, "name": "get_user_details"}}',
    }
    assert body["messages"][3]["role"] == "user"
    assert json.loads(body["messages"][3]["content"]) == {
        "tool_result": {"name": "get_user_details", "content": '{"name": "Mia"}'}
    }


def test_the_local_models_are_registered_with_prompt_tool_calling() -> None:
    registry = ModelRegistrySettings.model_validate(
        {
            "REPLAYBOOK_LOCAL_MODELS_URL": "http://127.0.0.1:1/v1",
            "REPLAYBOOK_MODELS": json.dumps(
                {"remote": {"base_url": "http://x/v1", "model_id": "y"}}
            ),
        }
    )
    entries = registry.entries()
    assert entries["gemma3-270m"].tool_calling == "prompt"
    assert entries["smollm2-135m"].tool_calling == "prompt"
    assert entries["remote"].tool_calling == "native"
    assert registry.provider("gemma3-270m").tool_calling == "prompt"
