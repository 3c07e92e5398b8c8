"""EXACT replays send the recorded compiled prompt, and say when today's code compiles another.

The recording stored each compiled prompt as an artifact (``PromptArtifact.content_ref``,
hashed as ``compiled_hash``). An EXACT replay sends that text again, never today's
compilation; it still compiles with today's code (templates, injected tenant configuration,
tool schemas…) and, when the hash differs, records a ``prompt_drift`` beside the model call:
both hashes, both texts' artifacts and a unified diff (capped), which the comparison turns
into a ``PROMPT_DRIFT`` difference at that step.
"""

from __future__ import annotations

import difflib
from typing import Any

from models.digest import sha256_digest
from models.errors import IntegrityError, NotFoundError
from runtime.model_gateway import RecordingModelGateway
from runtime.ports import ModelProvider
from runtime.prompts import PromptBundle
from runtime.recorder import RunRecorder
from runtime.replay.gateways import StepLedger
from runtime.replay.source import ReplaySource

#: the unified diff kept in the evidence (and carried in the comparison) is cut here; the two
#: full texts stay retrievable by their artifact references
MAX_DIFF_CHARS = 6000


def prompt_diff(recorded: str, recompiled: str) -> str:
    """The unified diff of the recorded compiled prompt and today's, cut at ``MAX_DIFF_CHARS``
    (the cut says how many characters were left out)."""
    text = "".join(
        difflib.unified_diff(
            recorded.splitlines(keepends=True),
            recompiled.splitlines(keepends=True),
            fromfile="recorded",
            tofile="recompiled",
        )
    )
    if len(text) <= MAX_DIFF_CHARS:
        return text
    return text[:MAX_DIFF_CHARS] + f"\n… ({len(text) - MAX_DIFF_CHARS} more characters)\n"


class RecordedPromptModelGateway(RecordingModelGateway):
    """The model gateway of an EXACT replay: the n-th model call is sent the compiled prompt
    the source's n-th call was sent (a call the source recorded no prompt for is sent today's
    compilation, and there is nothing to compare)."""

    def __init__(
        self,
        provider: ModelProvider,
        bundle: PromptBundle,
        recorder: RunRecorder,
        *,
        model: str,
        source: ReplaySource,
        positions: StepLedger,
    ) -> None:
        super().__init__(provider, bundle, recorder, model=model)
        self.source = source
        self.positions = positions

    async def prompt_to_send(
        self, template_name: str, compiled: str
    ) -> tuple[str, dict[str, Any] | None]:
        # the provider counts the call after this: the position is this call's index
        index = self.positions.model_calls
        recorded = self.source.model_prompt(index)
        if recorded is None:
            return compiled, None
        today = sha256_digest(compiled.encode())
        text = await self._recorded_text(recorded.content_ref, recorded.compiled_hash)
        if today == recorded.compiled_hash and text is not None:
            return text, None
        drift = {
            "template": f"{self.bundle.version}/{template_name}",
            "recorded_template": recorded.template_version,
            "recorded_hash": recorded.compiled_hash,
            "recompiled_hash": today,
            "recorded_ref": recorded.content_ref,
            "recompiled_ref": await self.recorder.artifacts.put(compiled.encode()),
            "diff": prompt_diff(text, compiled)
            if text is not None
            # never a silent fall-back: the drift says the recording could not be sent
            else "the recorded compiled prompt is not retrievable as recorded: today's "
            "compilation was sent instead\n",
        }
        return (text if text is not None else compiled), drift

    async def _recorded_text(self, ref: str, compiled_hash: str) -> str | None:
        """The recorded compiled prompt's text, or None when its artifact is gone or no longer
        hashes to what was recorded (content destroyed by a deletion request, say)."""
        try:
            data = await self.recorder.artifacts.get(ref)
        except (NotFoundError, IntegrityError):
            return None
        if sha256_digest(data) != compiled_hash:
            return None
        return data.decode()
