"""What a model provider may offer beyond ``runtime.ports.ModelProvider``, as protocols, and the
one walk through wrappers that finds it (issue 34: no attribute probing).

A live replay wraps the configured provider (``runtime.replay.gateways.LiveModelProvider``:
budget and sampling seed); what the tool loop records as sent, or what the worker tells a
sandboxed step of its endpoint, belongs to the first provider of the chain that offers it, so
each finder below walks ``wrapped_providers``. Protocol checks at run time look at names only
(Python 3.11 by ``hasattr``), as the probes they replace did.

Pure: no I/O (the sandboxed child imports ``runtime.providers.wire``, which imports this).
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, Protocol, runtime_checkable

from models.model_call import ModelRequest
from runtime.ports import ModelProvider
from runtime.providers.prompt_tools import ToolCalling

__all__ = [
    "ChatCompletionsProvider",
    "CompilingProvider",
    "PreparingProvider",
    "PricedProvider",
    "SerialProvider",
    "WrappingProvider",
    "compiling_provider",
    "preparing_provider",
    "serial_provider",
    "wrapped_providers",
]


@runtime_checkable
class WrappingProvider(Protocol):
    """A provider around another one (``LiveModelProvider``), which answers its calls."""

    @property
    def inner(self) -> ModelProvider: ...


@runtime_checkable
class PreparingProvider(Protocol):
    """A provider that changes a request before sending it (a live replay: sampling seed,
    ``max_tokens`` within the budget); ``prepared`` is idempotent and counts nothing."""

    def prepared(self, request: ModelRequest) -> ModelRequest: ...


@runtime_checkable
class CompilingProvider(Protocol):
    """A provider that sends a chat-completions body it can show before the call
    (``OpenAICompatibleProvider``; a sandboxed step's ``ProxyModel``), and whether the tools
    were offered in the prompt."""

    def compile(self, request: ModelRequest) -> tuple[dict[str, Any], bool]: ...


@runtime_checkable
class ChatCompletionsProvider(CompilingProvider, Protocol):
    """A compiling provider that names its endpoint's model and how it offers tools (what
    ``runtime.providers.wire.request_body`` needs to compile the same body elsewhere)."""

    @property
    def model(self) -> str: ...

    @property
    def tool_calling(self) -> ToolCalling: ...


@runtime_checkable
class SerialProvider(Protocol):
    """A provider whose endpoint may compute one request at a time (``one_at_a_time``: the
    embedded stack's local model server)."""

    @property
    def one_at_a_time(self) -> bool: ...


@runtime_checkable
class PricedProvider(Protocol):
    """A provider that declares one price per 1,000 tokens (a scripted model, a sandboxed
    step's ``ProxyModel``), so a call's worst case can be refused before it is made."""

    @property
    def price_per_1k_tokens(self) -> Decimal | None: ...


def wrapped_providers(provider: object) -> Iterator[object]:
    """``provider``, then the provider it wraps (its ``inner``), and so on to the innermost."""
    current: object = provider
    while current is not None:
        yield current
        current = current.inner if isinstance(current, WrappingProvider) else None


def preparing_provider(provider: object) -> PreparingProvider | None:
    """The first provider of ``provider``'s chain that prepares requests, if any."""
    return next((p for p in wrapped_providers(provider) if isinstance(p, PreparingProvider)), None)


def compiling_provider(provider: object) -> CompilingProvider | None:
    """The first provider of ``provider``'s chain that compiles the body it sends, if any."""
    return next((p for p in wrapped_providers(provider) if isinstance(p, CompilingProvider)), None)


def serial_provider(provider: object) -> SerialProvider | None:
    """The first provider of ``provider``'s chain that says whether its endpoint computes one
    request at a time, if any."""
    return next((p for p in wrapped_providers(provider) if isinstance(p, SerialProvider)), None)
