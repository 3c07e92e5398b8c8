"""A wrapped ``openai`` client against the real local model server (llama.cpp, smollm2-135m):
the recorded answer is the one the agent got, plain and streamed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import replaybook

from tests.sdk.servers import ApiProcess

MODEL = "smollm2-135m"


def _calls(api: ApiProcess, run_id: str) -> list[dict[str, Any]]:
    with api.client() as client:
        view = client.get(f"/api/runs/{run_id}").json()
        assert view["status"] == "COMPLETED"
        return [
            client.get(f"/api/runs/{run_id}/events/{e['sequence']}").json()["payload"]
            for e in view["events"]
            if e["type"] == "MODEL_CALL"
        ]


def test_a_wrapped_client_records_the_local_models_answers(
    api: ApiProcess,
    spool: Path,
    local_models_url: str,
) -> None:
    client = replaybook.wrap(openai.OpenAI(base_url=local_models_url, api_key="local"))
    ask: dict[str, Any] = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "max_tokens": 12,
        "temperature": 0.0,
        "seed": 1,
    }
    with replaybook.run(agent="capital-quiz") as run:
        plain = client.chat.completions.create(**ask)
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(stream=True, **ask)
            if chunk.choices
        )
    assert replaybook.flush(60)
    first, second = _calls(api, run.run_id)
    assert first["response"]["content"] == plain.choices[0].message.content
    assert first["usage"]["completion_tokens"] == plain.usage.completion_tokens
    assert second["response"]["content"] == streamed
    assert second["request_parameters"]["stream"] is True
    assert first["seed"] == second["seed"] == 1
