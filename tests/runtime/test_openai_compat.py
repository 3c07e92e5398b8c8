"""``OpenAICompatibleProvider`` against a real local HTTP server speaking chat completions."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from models.errors import ConfigurationError, ModelProviderError
from models.model_call import ChatMessage, ModelRequest, ToolCallRequest, ToolSchema
from runtime.env_values import read_section
from runtime.ports import ModelProvider
from runtime.providers.endpoint import ModelEndpointSettings
from runtime.providers.openai_compat import OpenAICompatibleProvider
from tests.runtime.chat_server import (
    ChatServer,
    Scripted,
    completion,
    error_answer,
    text_answer,
    tool_call_answer,
)

MakeProvider = Callable[..., OpenAICompatibleProvider]


def from_variables(env: dict[str, str]) -> OpenAICompatibleProvider:
    """The provider of the endpoint these ``REPLAYBOOK_MODEL_*`` variables configure."""
    return OpenAICompatibleProvider.from_settings(read_section(ModelEndpointSettings, env))


@pytest.fixture
def server() -> Iterator[ChatServer]:
    with ChatServer() as chat_server:
        yield chat_server


@pytest.fixture
async def make_provider(server: ChatServer) -> AsyncIterator[MakeProvider]:
    made: list[OpenAICompatibleProvider] = []

    def make(**kwargs: Any) -> OpenAICompatibleProvider:
        kwargs = {
            "base_url": server.base_url,
            "model": "test-model",
            "api_key": "sk-test",
            **kwargs,
        }
        provider = OpenAICompatibleProvider(**kwargs)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


def hello() -> ModelRequest:
    return ModelRequest(model="agent-model", messages=(ChatMessage(role="user", content="hello"),))


async def test_request_mapping_as_seen_by_the_server(
    server: ChatServer, make_provider: MakeProvider
) -> None:
    server.script(text_answer("done"))
    provider = make_provider(default_headers={"X-Tenant": "acme"})
    request = ModelRequest(
        model="agent-model",
        messages=(
            ChatMessage(role="system", content="You are terse."),
            ChatMessage(role="user", content="Weather in Paris and Oslo?"),
            ChatMessage(
                role="assistant",
                tool_calls=(
                    ToolCallRequest(id="call_1", name="weather", arguments={"city": "Paris"}),
                    ToolCallRequest(
                        id="call_2", name="weather", arguments={"city": "Oslo", "days": [1, 2]}
                    ),
                ),
            ),
            ChatMessage(role="tool", tool_call_id="call_1", content='{"celsius": 21}'),
            ChatMessage(role="tool", tool_call_id="call_2", content='{"celsius": 9}'),
        ),
        tools=(
            ToolSchema(
                name="weather",
                description="Current weather for a city",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
        ),
        temperature=0.2,
        max_tokens=128,
        seed=7,
    )

    await provider.complete(request)

    [body] = server.bodies
    assert body["model"] == "test-model"  # the configured model, not request.model
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 128
    assert body["seed"] == 7
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "arguments": '{"city": "Oslo", "days": [1, 2]}',
                    },
                },
            ],
        },
        {"role": "tool", "content": '{"celsius": 21}', "tool_call_id": "call_1"},
        {"role": "tool", "content": '{"celsius": 9}', "tool_call_id": "call_2"},
    ]
    headers = {k.lower(): v for k, v in server.received[-1].headers.items()}
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["x-tenant"] == "acme"


async def test_unset_options_are_not_sent(server: ChatServer, make_provider: MakeProvider) -> None:
    server.script(text_answer("hi"))
    await make_provider().complete(hello())
    [body] = server.bodies
    assert set(body) == {"model", "messages"}


async def test_text_answer_mapping_with_cost(
    server: ChatServer, make_provider: MakeProvider
) -> None:
    server.script(
        text_answer(
            "Hello!",
            prompt_tokens=1200,
            completion_tokens=300,
            response_id="chatcmpl-42",
            model="gpt-x-2025",
        )
    )
    provider = make_provider(
        price_per_1k_prompt=Decimal("0.0005"), price_per_1k_completion=Decimal("0.0015")
    )

    response = await provider.complete(hello())

    assert response.content == "Hello!"
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (1200, 300)
    assert response.cost == Decimal("0.0006") + Decimal("0.00045")
    assert response.response_id == "chatcmpl-42"
    assert response.model == "gpt-x-2025"  # as the server reports it


async def test_cost_is_zero_without_prices(server: ChatServer, make_provider: MakeProvider) -> None:
    server.script(text_answer("x", prompt_tokens=10, completion_tokens=5))
    response = await make_provider().complete(hello())
    assert response.cost == 0
    assert response.usage.total_tokens == 15


async def test_missing_usage_counts_zero(server: ChatServer, make_provider: MakeProvider) -> None:
    server.script(Scripted(body=completion({"role": "assistant", "content": "x"}, usage=None)))
    response = await make_provider(price_per_1k_prompt=Decimal(1)).complete(hello())
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (0, 0)
    assert response.cost == 0


async def test_tool_call_answer_is_parsed(server: ChatServer, make_provider: MakeProvider) -> None:
    server.script(
        tool_call_answer(
            ("call_a", "weather", '{"city": "Paris", "units": {"temp": "C"}}'),
            ("call_b", "clock", "{}"),
            usage={"prompt_tokens": 50, "completion_tokens": 20},
        )
    )
    response = await make_provider().complete(hello())
    assert response.finish_reason == "tool_calls"
    assert response.content is None
    assert response.tool_calls == (
        ToolCallRequest(
            id="call_a", name="weather", arguments={"city": "Paris", "units": {"temp": "C"}}
        ),
        ToolCallRequest(id="call_b", name="clock", arguments={}),
    )


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"city": "Par', "not valid JSON"),
        ('{"x": NaN}', "not valid JSON"),
        ('["Paris"]', "not a JSON object"),
    ],
)
async def test_malformed_tool_call_arguments(
    server: ChatServer, make_provider: MakeProvider, arguments: str, problem: str
) -> None:
    server.script(tool_call_answer(("call_bad", "weather", arguments)))
    with pytest.raises(ModelProviderError) as caught:
        await make_provider().complete(hello())
    assert "call_bad" in str(caught.value) and "weather" in str(caught.value)
    assert problem in str(caught.value)
    assert caught.value.retryable is False


@pytest.mark.parametrize(
    ("answer", "status", "retryable", "fragment"),
    [
        (
            error_answer(429, "Rate limit reached", type_="rate_limit_error"),
            429,
            True,
            "Rate limit reached",
        ),
        (
            error_answer(500, "The server had an error", type_="server_error"),
            500,
            True,
            "had an error",
        ),
        (Scripted(503, "upstream unavailable"), 503, True, "upstream unavailable"),
        (
            error_answer(400, "Unknown parameter: 'frobnicate'."),
            400,
            False,
            "Unknown parameter: 'frobnicate'.",
        ),
        (
            error_answer(401, "Incorrect API key provided", type_="auth"),
            401,
            False,
            "Incorrect API key",
        ),
    ],
    ids=["429", "500", "503-plain-text", "400", "401"],
)
async def test_http_errors(
    server: ChatServer,
    make_provider: MakeProvider,
    answer: Scripted,
    status: int,
    retryable: bool,
    fragment: str,
) -> None:
    server.script(answer)
    with pytest.raises(ModelProviderError) as caught:
        await make_provider().complete(hello())
    error = caught.value
    assert (error.status, error.retryable) == (status, retryable)
    assert (
        server.base_url in str(error) and f"HTTP {status}" in str(error) and fragment in str(error)
    )
    assert len(server.bodies) == 1  # the SDK did not retry on its own


async def test_timeout_is_retryable_and_not_retried(
    server: ChatServer, make_provider: MakeProvider
) -> None:
    server.script(Scripted(body=completion({"role": "assistant", "content": "late"}), delay=5.0))
    with pytest.raises(ModelProviderError) as caught:
        await make_provider(timeout=0.3).complete(hello())
    assert caught.value.retryable is True and caught.value.status is None
    assert "timed out after 0.3s" in str(caught.value) and server.base_url in str(caught.value)
    assert len(server.bodies) == 1


async def test_a_trickling_answer_is_cut_at_the_call_deadline(
    server: ChatServer, make_provider: MakeProvider
) -> None:
    # each byte comes well inside httpx's read timeout, so only a deadline on the whole call
    # ends it: the answer would take about 30 s
    body = completion({"role": "assistant", "content": "slow"})
    server.script(Scripted(body=body, trickle=0.1))
    with pytest.raises(ModelProviderError) as caught:
        await make_provider(timeout=0.5).complete(hello())
    assert caught.value.retryable is True
    assert "timed out after 0.5s" in str(caught.value)


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    provider = OpenAICompatibleProvider(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout=2
    )
    try:
        with pytest.raises(ModelProviderError) as caught:
            await provider.complete(hello())
    finally:
        await provider.aclose()
    assert caught.value.retryable is True and caught.value.status is None
    assert f"127.0.0.1:{port}" in str(caught.value) and "cannot connect" in str(caught.value)


async def test_empty_choices_is_not_retryable(
    server: ChatServer, make_provider: MakeProvider
) -> None:
    body = completion({"role": "assistant", "content": "x"})
    body["choices"] = []
    server.script(Scripted(body=body))
    with pytest.raises(ModelProviderError) as caught:
        await make_provider().complete(hello())
    assert caught.value.retryable is False and "no choices" in str(caught.value)
    assert len(server.bodies) == 1


async def test_profile_and_protocol(server: ChatServer, make_provider: MakeProvider) -> None:
    provider = make_provider(base_url=server.base_url + "/")
    assert provider.profile == f"openai-compatible:test-model@{server.base_url}"
    assert isinstance(provider, ModelProvider)


async def test_from_env_reads_settings(server: ChatServer) -> None:
    server.script(text_answer("ok"))
    env = {
        "REPLAYBOOK_MODEL_BASE_URL": server.base_url,
        "REPLAYBOOK_MODEL_NAME": "env-model",
        "REPLAYBOOK_MODEL_TIMEOUT": "7.5",
        "OPENAI_API_KEY": "sk-fallback",
    }
    provider = from_variables(env)
    try:
        assert provider.profile == f"openai-compatible:env-model@{server.base_url}"
        assert provider.timeout == 7.5
        await provider.complete(hello())
    finally:
        await provider.aclose()
    headers = {k.lower(): v for k, v in server.received[-1].headers.items()}
    assert headers["authorization"] == "Bearer sk-fallback"
    assert server.bodies[-1]["model"] == "env-model"


def test_from_env_prefers_replaybook_key() -> None:
    env = {
        "REPLAYBOOK_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "REPLAYBOOK_MODEL_NAME": "m",
        "REPLAYBOOK_MODEL_API_KEY": "sk-replaybook",
        "OPENAI_API_KEY": "sk-openai",
    }
    provider = from_variables(env)
    assert provider._client.api_key == "sk-replaybook"
    assert provider.timeout == 60.0


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"REPLAYBOOK_MODEL_NAME": "m"}, "REPLAYBOOK_MODEL_BASE_URL"),
        (
            {"REPLAYBOOK_MODEL_BASE_URL": " ", "REPLAYBOOK_MODEL_NAME": "m"},
            "REPLAYBOOK_MODEL_BASE_URL",
        ),
        ({"REPLAYBOOK_MODEL_BASE_URL": "http://x/v1"}, "REPLAYBOOK_MODEL_NAME"),
        (
            {
                "REPLAYBOOK_MODEL_BASE_URL": "http://x/v1",
                "REPLAYBOOK_MODEL_NAME": "m",
                "REPLAYBOOK_MODEL_TIMEOUT": "soon",
            },
            "REPLAYBOOK_MODEL_TIMEOUT",
        ),
        (
            {
                "REPLAYBOOK_MODEL_BASE_URL": "http://x/v1",
                "REPLAYBOOK_MODEL_NAME": "m",
                "REPLAYBOOK_MODEL_TIMEOUT": "0",
            },
            "REPLAYBOOK_MODEL_TIMEOUT",
        ),
    ],
    ids=["no-base-url", "blank-base-url", "no-model", "bad-timeout", "zero-timeout"],
)
def test_from_env_errors_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        from_variables(env)
