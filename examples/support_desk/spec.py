"""Assembling the support desk's ``AgentSpec`` and recording a scenario."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from examples.support_desk.agent import (
    CAPABILITIES,
    POLICIES,
    PROMPTS,
    SCENARIOS,
    SUPPORT_DESK_V1,
    WRITE_POLICY,
    SimulatedApprover,
)
from examples.support_desk.knowledge import KeywordRetriever
from examples.support_desk.model import ScriptedSupportModel
from examples.support_desk.providers import SimulatedWorld
from models.errors import InvalidInputError
from models.redaction import REDACT_V2
from runtime.executor import RunResult
from runtime.ports import ArtifactStore, EventLedger, ModelProvider
from runtime.session import AgentSpec, record_run
from runtime.tools import ToolProvider

ROOT = Path(__file__).resolve().parents[2]
#: the scripted model's name (``catalog.MODEL_V1``)
MODEL_V1 = "support-desk-model@1"


def support_desk_spec(
    world: SimulatedWorld,
    prompt_version: str = "v17",
    *,
    deny_approvals: bool = False,
    model: ModelProvider | None = None,
    model_name: str = MODEL_V1,
    email_send: ToolProvider | None = None,
) -> AgentSpec:
    """``model``/``model_name``: the model deciding (default: the scripted stand-in);
    ``email_send``: another ``email.send`` provider (the outbox's, ``outbox.OutboxEmail``)."""
    if prompt_version not in PROMPTS:
        raise InvalidInputError(
            f"unknown prompt bundle {prompt_version!r} (known: {', '.join(sorted(PROMPTS))})"
        )
    return AgentSpec(
        graph=SUPPORT_DESK_V1,
        prompts=PROMPTS[prompt_version],
        capabilities=CAPABILITIES,
        policies=POLICIES,
        write_policy_id=WRITE_POLICY,
        tool_providers={
            "crm.get_customer": world.crm_get_customer,
            "crm.find_by_phone": world.crm_find_by_phone,
            "payment.refund": world.payment_refund,
            "email.send": email_send or world.email_send,
        },
        model=model or ScriptedSupportModel(),
        model_name=model_name if model is not None else MODEL_V1,
        retriever=KeywordRetriever(),
        approver=SimulatedApprover(deny=deny_approvals),
        source_root=ROOT,
        redaction_policy_version=REDACT_V2,
    )


def scenario_run_input(
    world: SimulatedWorld, scenario: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """The agent input (the ticket, made unique to this run) and the labels of one run of
    ``scenario``; arranges the world for it (the refund whose response is lost)."""
    if scenario not in SCENARIOS:
        raise InvalidInputError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})")
    ticket: dict[str, Any] = dict(SCENARIOS[scenario])
    if scenario == "refund-timeout":
        world.drop_refund_response_for.add(ticket["order_id"])
    # each run gets its own ticket id and order so that idempotency keys never collide
    suffix = uuid.uuid4().hex[:6]
    ticket["ticket_id"] = f"{ticket['ticket_id']}-{suffix}"
    if "order_id" in ticket:
        ticket["order_id"] = f"{ticket['order_id']}-{suffix}"
        if scenario == "refund-timeout":
            world.drop_refund_response_for.add(ticket["order_id"])
    # the data subjects: the customer the ticket is about, and the tenant
    labels = {
        "scenario": scenario,
        "agent": "support-desk",
        "subject": f"customer:{ticket['customer_id']}",
        "tenant": "acme",
    }
    return ticket, labels


async def run_scenario(
    world: SimulatedWorld,
    ledger: EventLedger,
    artifacts: ArtifactStore,
    scenario: str,
    *,
    prompt_version: str = "v17",
    seed: int = 0,
    run_id: str | None = None,
    model: ModelProvider | None = None,
    model_name: str = MODEL_V1,
    email_send: ToolProvider | None = None,
) -> RunResult:
    """Record one live run of ``scenario`` against the simulated providers; ``model`` (named
    ``model_name``) decides, the scripted stand-in by default."""
    ticket, labels = scenario_run_input(world, scenario)
    await world.ensure()
    return await record_run(
        support_desk_spec(
            world, prompt_version, model=model, model_name=model_name, email_send=email_send
        ),
        ledger,
        artifacts,
        run_id=run_id or f"run-{uuid.uuid4().hex[:12]}",
        agent_input=ticket,
        seed=seed,
        labels=labels,
    )
