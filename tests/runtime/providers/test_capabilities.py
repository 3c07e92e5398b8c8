"""A model provider's optional capabilities are found by the protocols of
``runtime.providers.capabilities``, through a live replay's wrapper (its ``inner``), as the
attribute probes they replace found them: what the tool loop records as sent, what the worker
tells a sandboxed step of its endpoint, and whether a replay's children must run one at a time
all depend on it. Real providers, no network (no call is made)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from activities.sandbox.proxies import ProxyModel
from models.budget import BudgetUsage
from models.digest import sha256_digest
from models.model_call import ChatMessage, ModelRequest, ToolSchema
from models.replay import ReplayBudget
from models.tools_module import ToolsModulePin
from runtime.ports import AttributedToolProvider
from runtime.providers.capabilities import (
    ChatCompletionsProvider,
    PreparingProvider,
    PricedProvider,
    SerialProvider,
    WrappingProvider,
    compiling_provider,
    preparing_provider,
    serial_provider,
    wrapped_providers,
)
from runtime.providers.openai_compat import OpenAICompatibleProvider
from runtime.providers.wire import wire_settings
from runtime.replay.catalog import answers_one_at_a_time
from runtime.replay.gateways import LiveModelProvider, StepLedger, model_price
from runtime.team_tools import TeamTools
from runtime.tool_loop.conversation import as_sent
from runtime.tools import ToolCallContext

REQUEST = ModelRequest(
    model="agent-model",
    messages=(ChatMessage(role="user", content="where is order 7?"),),
    tools=(ToolSchema(name="lookup", description="an order", parameters={"type": "object"}),),
)


def _endpoint() -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(
        base_url="http://127.0.0.1:9/v1", model="gemma", tool_calling="prompt", one_at_a_time=True
    )


def _live(inner: OpenAICompatibleProvider) -> LiveModelProvider:
    return LiveModelProvider(inner, StepLedger(), ReplayBudget(max_tokens=500), BudgetUsage(), 7)


def test_a_live_replay_is_looked_through_to_the_endpoint() -> None:
    endpoint = _endpoint()
    live = _live(endpoint)
    # declared, so mypy checks the classes against the protocols
    wrapper: WrappingProvider = live
    preparing: PreparingProvider = live
    chat: ChatCompletionsProvider = endpoint
    serial: SerialProvider = endpoint
    assert list(wrapped_providers(wrapper)) == [live, endpoint]
    assert preparing_provider(live) is preparing
    assert compiling_provider(live) is chat
    assert serial_provider(live) is serial
    sent = as_sent(live, REQUEST)
    assert sent == live.prepared(REQUEST) and sent.seed is not None and sent.max_tokens
    assert wire_settings(live) == {"model_id": "gemma", "tool_calling": "prompt"}
    assert answers_one_at_a_time(live)
    assert model_price(endpoint) is None  # priced per prompt and completion, not per token


class _Recorded:
    """A provider that offers nothing beyond ``ModelProvider`` (as a recorded replay's)."""

    profile = "recorded:x"


def test_a_provider_that_offers_nothing_is_used_as_it_is() -> None:
    plain = _Recorded()
    assert list(wrapped_providers(plain)) == [plain]
    assert preparing_provider(plain) is None and compiling_provider(plain) is None
    assert as_sent(plain, REQUEST) is REQUEST
    assert wire_settings(plain) is None
    assert not answers_one_at_a_time(plain)
    assert model_price(plain) is None
    assert not answers_one_at_a_time(_live(OpenAICompatibleProvider(base_url="x", model="m")))


def test_a_sandboxed_steps_proxy_compiles_but_names_no_endpoint() -> None:
    def never(method: str, params: dict[str, Any]) -> Any:
        raise AssertionError(f"no call expected: {method}")

    proxy = ProxyModel(
        never, "g", "m", "p", Decimal("0.002"), {"model_id": "gemma", "tool_calling": "prompt"}
    )
    priced: PricedProvider = proxy
    assert compiling_provider(proxy) is proxy
    assert proxy.compile(REQUEST) == _endpoint().compile(REQUEST)
    assert wire_settings(proxy) is None  # it passes the worker's settings on, does not own them
    assert model_price(priced) == Decimal("0.002")


def test_a_team_tools_provider_names_its_module() -> None:
    async def gate(name: str, arguments: dict[str, Any], context: ToolCallContext) -> datetime:
        raise AssertionError("not called")

    pin = ToolsModulePin(module="acme.tools", digest=sha256_digest(b"acme"), read_tools=("lookup",))
    provider = TeamTools(pin, {"lookup": lambda arguments, context: {}}, ()).providers(gate)[
        "lookup"
    ]
    assert isinstance(provider, AttributedToolProvider)
    assert provider.answered_by == pin.label()
    assert not isinstance(gate, AttributedToolProvider)
