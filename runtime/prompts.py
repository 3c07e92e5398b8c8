"""Prompt bundles and compilation: what the model sees is the compiled text, never just a
template name (rule 9). Compilation is deterministic: the same template and injections always
give the same text, hence the same hash."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from models.canonical import canonical_hash, canonicalize
from models.model_call import ToolSchema


@dataclass(frozen=True)
class PromptBundle:
    """A versioned set of prompt templates (``v17``, ``v18``…)."""

    version: str
    templates: Mapping[str, str]

    def template(self, name: str) -> str:
        try:
            return self.templates[name]
        except KeyError:
            raise KeyError(f"prompt bundle {self.version} has no template {name!r}") from None

    def bundle_hash(self) -> str:
        return canonical_hash({"version": self.version, "templates": dict(self.templates)})


@dataclass(frozen=True)
class PromptInjections:
    """Everything the runtime adds to a template before the model sees it."""

    system_policy: str = ""
    tool_schemas: tuple[ToolSchema, ...] = ()
    skills: tuple[str, ...] = ()
    tenant_config: Mapping[str, Any] = field(default_factory=dict)
    feature_flags: Mapping[str, bool] = field(default_factory=dict)


def compile_prompt(template_text: str, injections: PromptInjections) -> str:
    """The final system prompt text: template, then each injected part in a fixed layout."""
    parts = [template_text.rstrip()]
    if injections.system_policy:
        parts.append("## System policy\n" + injections.system_policy.rstrip())
    if injections.tool_schemas:
        tools = [t.model_dump(mode="json") for t in injections.tool_schemas]
        parts.append("## Tools\n" + canonicalize(tools).decode())
    if injections.skills:
        parts.append("## Skills\n" + "\n".join(f"- {s}" for s in injections.skills))
    if injections.tenant_config:
        parts.append(
            "## Tenant configuration\n" + canonicalize(dict(injections.tenant_config)).decode()
        )
    if injections.feature_flags:
        flags = ", ".join(
            f"{k}={'on' if v else 'off'}" for k, v in sorted(injections.feature_flags.items())
        )
        parts.append("## Feature flags\n" + flags)
    return "\n\n".join(parts) + "\n"


def approximate_token_count(text: str) -> int:
    """A provider-independent token estimate (about 4 characters a token) for accounting."""
    return max(1, (len(text) + 3) // 4)
