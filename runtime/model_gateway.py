"""The recording model gateway: each call records the compiled ``PromptArtifact`` (its text
stored as an artifact), a ``ContextSnapshot`` of everything else the model saw, and the call
itself (request hash, response, usage, cost, model profile)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models import ContextSnapshot, ExecutionEventType, PromptArtifact
from models.canonical import canonical_hash
from models.digest import sha256_digest
from models.model_call import ChatMessage, ModelRequest, ModelResponse, ToolSchema
from runtime.ids import new_hex
from runtime.ports import ModelProvider
from runtime.prompts import PromptBundle, PromptInjections, approximate_token_count, compile_prompt
from runtime.recorder import RunRecorder


class RecordingModelGateway:
    def __init__(
        self,
        provider: ModelProvider,
        bundle: PromptBundle,
        recorder: RunRecorder,
        *,
        model: str,
        temperature: float | None = None,
    ) -> None:
        self.provider = provider
        self.bundle = bundle
        self.recorder = recorder
        self.model = model
        self.temperature = temperature
        self.calls = 0

    async def complete(
        self,
        template_name: str,
        messages: Sequence[ChatMessage],
        *,
        injections: PromptInjections = PromptInjections(),
        state: Mapping[str, Any] | None = None,
        evidence_refs: Sequence[str] = (),
        memory_refs: Sequence[str] = (),
        seed: int | None = None,
    ) -> ModelResponse:
        compiled = compile_prompt(self.bundle.template(template_name), injections)
        compiled, drift = await self.prompt_to_send(template_name, compiled)
        text = compiled.encode()
        content_ref = await self.recorder.put_artifact(text)
        self.calls += 1
        prompt = PromptArtifact(
            artifact_id=f"prompt-{new_hex(16)}",
            template_version=f"{self.bundle.version}/{template_name}",
            compiled_hash=sha256_digest(text),
            content_ref=content_ref,
            token_count=approximate_token_count(compiled),
            compiled_at=self.recorder.logical_time(),
        )
        await self.recorder.record(ExecutionEventType.PROMPT_COMPILED, record=prompt)

        full = (ChatMessage(role="system", content=compiled), *messages)
        tools: tuple[ToolSchema, ...] = injections.tool_schemas
        request = ModelRequest(
            model=self.model, messages=full, tools=tools, temperature=self.temperature, seed=seed
        )
        # dumped once: its messages and tools are the dumps of each message and tool
        dumped = request.model_dump(mode="json")
        message_refs = [await self.recorder.store_json(m) for m in dumped["messages"]]
        request_hash = canonical_hash(dumped)
        snapshot = ContextSnapshot(
            snapshot_id=f"ctx-{new_hex(16)}",
            run_id=self.recorder.run_id,
            step_id=self.recorder.step_id,
            message_refs=tuple(message_refs),
            evidence_refs=tuple(evidence_refs),
            memory_refs=tuple(memory_refs),
            tool_catalog_hash=canonical_hash(dumped["tools"]),
            state_hash=canonical_hash(dict(state or {})),
            content_hash=request_hash,
        )
        await self.recorder.record(ExecutionEventType.CONTEXT_SNAPSHOT, record=snapshot)

        response = await self.provider.complete(request)
        await self.recorder.record(
            ExecutionEventType.MODEL_CALL,
            payload={
                "model_profile": self.provider.profile,
                "prompt_artifact_id": prompt.artifact_id,
                "context_snapshot_id": snapshot.snapshot_id,
                "request_hash": request_hash,
                "seed": seed,
                "response": response.model_dump(mode="json"),
                "usage": {
                    "prompt_tokens": response.usage.prompt_tokens,
                    "completion_tokens": response.usage.completion_tokens,
                },
                "cost": str(response.cost),
                # EXACT replays: today's compilation differs from the recorded prompt it sent
                **({"prompt_drift": drift} if drift is not None else {}),
            },
        )
        return response

    async def prompt_to_send(
        self, template_name: str, compiled: str
    ) -> tuple[str, dict[str, Any] | None]:
        """The system prompt the model is sent (today's compilation ``compiled``) and what
        differs from the recording (nothing here; see the EXACT replay's gateway)."""
        return compiled, None
