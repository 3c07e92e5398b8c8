"""The support desk recorded against a real chat-completions HTTP endpoint (local server)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from decimal import Decimal

from examples.support_desk.spec import support_desk_spec
from models import ExecutionEventType
from runtime.completeness import evidence_completeness
from runtime.providers.openai_compat import OpenAICompatibleProvider
from runtime.session import record_run
from tests.runtime.chat_server import ChatServer, text_answer, tool_call_answer


async def test_a_run_through_an_openai_compatible_endpoint_is_complete_evidence(rec) -> None:
    with ChatServer() as server:
        server.script(
            tool_call_answer(
                ("c1", "kb.search", '{"query": "invoice by email"}'),
                ("c2", "crm.get_customer", '{"customer_id": "C-2002"}'),
                ("c3", "email.send", "{}"),
                usage={"prompt_tokens": 900, "completion_tokens": 40},
            ),
            text_answer(
                '{"subject": "Your invoice", "body": "Hello Carol"}',
                prompt_tokens=300,
                completion_tokens=20,
            ),
        )
        provider = OpenAICompatibleProvider(
            base_url=server.base_url,
            model="served-model",
            price_per_1k_prompt=Decimal("0.01"),
            price_per_1k_completion=Decimal("0.03"),
        )
        spec = dataclasses.replace(
            support_desk_spec(rec.world, "v18"), model=provider, model_name="served-model"
        )
        run_id = f"run-{uuid.uuid4().hex[:12]}"
        ticket = {
            "ticket_id": "T-llm",
            "customer_id": "C-2002",
            "phone": "+1-555-0199",
            "message": "Invoice please",
        }
        try:
            result = await record_run(
                spec, rec.ledger, rec.artifacts, run_id=run_id, agent_input=ticket, seed=1
            )
        finally:
            await provider.aclose()
        bodies = server.bodies

    assert result.outcome["emailed"] == "carol@example.com"
    assert len(bodies) == 2
    system = bodies[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("ROLE: planner")
    assert (
        "customer_id; never by phone number" in system["content"]
        and "## Tools" in system["content"]
    )
    assert json.loads(bodies[0]["messages"][1]["content"])["customer_id"] == "C-2002"

    events = await rec.ledger.events(run_id)
    calls = [
        json.loads(await rec.ledger.payload(e))
        for e in events
        if e.type is ExecutionEventType.MODEL_CALL
    ]
    assert [c["usage"] for c in calls] == [
        {"prompt_tokens": 900, "completion_tokens": 40},
        {"prompt_tokens": 300, "completion_tokens": 20},
    ]
    assert calls[0]["model_profile"] == f"openai-compatible:served-model@{server.base_url}"
    assert Decimal(calls[0]["cost"]) == Decimal("0.0102")
    completeness = await evidence_completeness(rec.ledger, rec.evidence, rec.artifacts, run_id)
    assert completeness.summary() == "6/6"
    assert (await rec.ledger.verify(run_id)).intact
