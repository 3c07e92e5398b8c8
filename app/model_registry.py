"""``replaybook models list``: the model registry, each model asked a one-token question to
show whether it answers and how long it took."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from models.errors import ReplaybookError
from models.model_call import ChatMessage, ModelRequest
from runtime.providers.registry import ModelRegistrySettings

#: a probe is one short completion; a model that takes longer does not answer
PROBE_TIMEOUT = 60.0


async def probe_model(registry: ModelRegistrySettings, name: str) -> dict[str, Any]:
    """Whether ``name`` answers a one-token chat completion, and the measured latency."""
    entry = registry.entry(name)
    out: dict[str, Any] = entry.summary() | {"answers": False, "latency_ms": None, "error": None}
    started = time.monotonic()
    try:
        provider = registry.provider(name)
        try:
            request = ModelRequest(
                model=name,
                messages=(ChatMessage(role="user", content="Say OK."),),
                max_tokens=1,
                temperature=0.0,
            )
            async with asyncio.timeout(PROBE_TIMEOUT):
                response = await provider.complete(request)
        finally:
            await provider.aclose()
    except (ReplaybookError, TimeoutError) as exc:
        out["error"] = str(exc) or f"no answer within {PROBE_TIMEOUT:g}s"
        return out
    out |= {
        "answers": True,
        "latency_ms": round((time.monotonic() - started) * 1000, 1),
        "answered_by": response.model,
        "usage": {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
        },
    }
    return out


async def list_models(registry: ModelRegistrySettings) -> list[dict[str, Any]]:
    """Every registered model with ``answers`` and ``latency_ms`` (probed one after another:
    a local server answers one request at a time)."""
    return [await probe_model(registry, name) for name in registry.entries()]
