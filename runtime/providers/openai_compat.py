"""``ModelProvider`` for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama,
a LiteLLM proxy), built on the official ``openai`` SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import openai
from pydantic import ValidationError

from models.canonical import canonical_hash
from models.errors import ConfigurationError, ModelProviderError
from models.model_call import ModelRequest, ModelResponse, TokenUsage, ToolCallRequest
from runtime.providers.endpoint import DEFAULT_TIMEOUT, ModelEndpointSettings
from runtime.providers.prompt_tools import ToolCalling, decode_answer
from runtime.providers.wire import request_body

#: Local servers ignore the key, but the SDK refuses to start without one; passing it explicitly
#: also stops the SDK from silently picking up ``OPENAI_API_KEY`` on its own.
PLACEHOLDER_API_KEY = "no-key"
_THOUSAND = Decimal(1000)


class OpenAICompatibleProvider:
    """One endpoint and model; never retries by itself (see ``max_retries`` below)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        price_per_1k_prompt: Decimal | None = None,
        price_per_1k_completion: Decimal | None = None,
        default_headers: Mapping[str, str] | None = None,
        tool_calling: ToolCalling = "native",
        one_at_a_time: bool = False,
    ) -> None:
        # One spelling per endpoint, so that the profile recorded with every call is stable.
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.price_per_1k_prompt = price_per_1k_prompt
        self.price_per_1k_completion = price_per_1k_completion
        #: how tools are offered: ``native`` (the request's ``tools``) or ``prompt`` (rendered
        #: into the system message, answer JSON-schema-constrained: ``prompt_tools``)
        self.tool_calling: ToolCalling = tool_calling
        #: the endpoint computes one request at a time (``llama_cpp.server``): requests sent
        #: together queue there, each one's wait counting against its timeout, so a replay's
        #: ``--repeat`` children that call it run one after the other (``workflows.replay``)
        self.one_at_a_time = one_at_a_time
        self.profile = f"openai-compatible:{model}@{self.base_url}"
        self._client = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key or PLACEHOLDER_API_KEY,
            timeout=timeout,
            # The caller (ultimately Temporal's retry policy) owns retries: SDK retries would hide
            # attempts from the recorded history and multiply the caller's own back-off.
            max_retries=0,
            default_headers=default_headers,
        )

    @classmethod
    def from_settings(cls, settings: ModelEndpointSettings) -> OpenAICompatibleProvider:
        """The provider of the configured endpoint (``ConfigurationError`` naming what is
        missing)."""
        base_url = (settings.base_url or "").strip()
        if not base_url:
            raise ConfigurationError(
                "REPLAYBOOK_MODEL_BASE_URL is not set", field="REPLAYBOOK_MODEL_BASE_URL"
            )
        model = (settings.name or "").strip()
        if not model:
            raise ConfigurationError(
                "REPLAYBOOK_MODEL_NAME is not set", field="REPLAYBOOK_MODEL_NAME"
            )
        api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        return cls(base_url=base_url, model=model, api_key=api_key, timeout=settings.timeout)

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(
        self, request: ModelRequest, *, response_format: Mapping[str, Any] | None = None
    ) -> ModelResponse:
        """``response_format``: the OpenAI ``response_format`` (e.g. a JSON schema the server
        constrains the answer to), passed as given."""
        offered = request.tools
        kwargs, prompted = self.compile(request, response_format=response_format)
        try:
            # The SDK's (httpx's) timeout bounds each read, not the call: a server that trickles
            # bytes, or a connection that never closes, would keep a replay step waiting. The
            # whole call gets the same deadline.
            async with asyncio.timeout(self.timeout):
                completion = await self._client.chat.completions.create(**kwargs)
        except TimeoutError as exc:
            raise self._error(f"timed out after {self.timeout:g}s", retryable=True) from exc
        except openai.APITimeoutError as exc:  # before APIConnectionError: it is a subclass
            raise self._error(f"timed out after {self.timeout:g}s", retryable=True) from exc
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise self._error(f"cannot connect: {cause}", retryable=True) from exc
        except openai.APIStatusError as exc:
            status = exc.status_code
            raise self._error(
                f"HTTP {status}: {_server_message(exc)}",
                status=status,
                retryable=status == 429 or status >= 500,
            ) from exc
        except openai.OpenAIError as exc:
            raise self._error(f"unusable answer: {exc}") from exc
        response = self._response(completion)
        if not prompted:
            return response
        content, calls = decode_answer(
            response.content, offered, response.response_id or canonical_hash(kwargs)
        )
        return response.model_copy(update={"content": content, "tool_calls": calls})

    def compile(
        self, request: ModelRequest, *, response_format: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], bool]:
        """The body sent for ``request`` (what gets recorded as sent), and whether the tools
        were offered in the prompt (its answer is then decoded by ``decode_answer``)."""
        return request_body(
            request,
            model=self.model,
            tool_calling=self.tool_calling,
            response_format=response_format,
        )

    def _response(self, completion: Any) -> ModelResponse:
        # Lenient SDK parsing builds objects without validation, so absent fields are possible.
        choices = getattr(completion, "choices", None)
        if not choices:
            raise self._error("answer has no choices")
        choice = choices[0]
        message = choice.message
        calls = tuple(self._tool_call(c) for c in (message.tool_calls or ()))
        usage = getattr(completion, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None) or 0
        completion_tokens = getattr(usage, "completion_tokens", None) or 0
        cost = (
            prompt * (self.price_per_1k_prompt or Decimal(0))
            + completion_tokens * (self.price_per_1k_completion or Decimal(0))
        ) / _THOUSAND
        try:
            return ModelResponse(
                model=getattr(completion, "model", None) or self.model,
                content=message.content,
                tool_calls=calls,
                finish_reason=choice.finish_reason,
                usage=TokenUsage(prompt_tokens=prompt, completion_tokens=completion_tokens),
                cost=cost,
                response_id=getattr(completion, "id", None),
            )
        except ValidationError as exc:
            raise self._error(f"malformed answer: {exc}") from exc

    def _tool_call(self, call: Any) -> ToolCallRequest:
        function = getattr(call, "function", None)
        if function is None:  # e.g. a "custom" tool call: only function tools are ever offered
            raise self._error(f"tool call {call.id!r} is of unsupported type {call.type!r}")
        where = f"tool call {call.id!r} ({function.name})"
        try:
            arguments = json.loads(function.arguments, parse_constant=_refuse_constant)
        except (TypeError, ValueError) as exc:
            raise self._error(f"{where} has arguments that are not valid JSON: {exc}") from exc
        if not isinstance(arguments, dict):
            raise self._error(f"{where} has arguments that are not a JSON object")
        return ToolCallRequest(id=call.id, name=function.name, arguments=arguments)

    def _error(
        self, problem: str, *, status: int | None = None, retryable: bool = False
    ) -> ModelProviderError:
        return ModelProviderError(
            f"model endpoint {self.base_url} ({self.model}): {problem}",
            status=status,
            retryable=retryable,
        )


def _server_message(exc: openai.APIStatusError) -> str:
    # The SDK stores the JSON ``error`` object as ``body``; proxies often answer plain text.
    body = exc.body
    if isinstance(body, Mapping) and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(body, str) and body:
        return body[:500]
    return exc.message


def _refuse_constant(name: str) -> Any:
    # NaN and Infinity are not JSON, and would break the canonical hashing of the evidence.
    raise ValueError(f"{name} is not a JSON value")
