"""The support-desk agent: Planner → Search → CRM lookup → Reviewer → Refund and/or Email.

Prompt bundle ``v17`` does not say how to identify customers; ``v18`` says to use
``customer_id`` — the fix of the seed's wrong-customer incident.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from models import ApprovalDecision, ApprovalRecord, PolicyDecision, SideEffectClass
from models.capability import Capability, PersonRecords
from models.model_call import ChatMessage
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.graph import GraphDefinition, GraphRegistry, State, StepResult
from runtime.policy import Policy, PolicySet
from runtime.prompts import PromptBundle, PromptInjections

GRAPH_ID = "support-desk"
WRITE_POLICY = "outbound-actions"

_PLANNER_V17 = (
    "ROLE: planner\n"
    "You are ACME's support planner. Read the ticket and decide which tools to call: search the\n"
    "knowledge base, look the customer up in the CRM, then plan refunds and emails.\n"
)
_WRITER = "ROLE: writer\nWrite a short, friendly reply email from the brief. Do not invent facts.\n"
PROMPTS = {
    "v17": PromptBundle("v17", {"planner": _PLANNER_V17, "writer": _WRITER}),
    "v18": PromptBundle(
        "v18",
        {
            "planner": _PLANNER_V17
            + "Identify customers by customer_id; never by phone number: phone numbers are not unique.\n",
            "writer": _WRITER,
        },
    ),
}

#: a CRM record is one customer's: a data subject of the run that read it, name redacted
CRM_PEOPLE = PersonRecords(id_field="customer_id", subject_prefix="customer", name_fields=("name",))

CAPABILITIES = CapabilityRegistry(
    "support-capabilities-2026.08",
    [
        Capability(
            capability_id="crm.get_customer",
            description="Look a customer up by customer_id.",
            schema_={
                "type": "object",
                "required": ["customer_id"],
                "properties": {"customer_id": {"type": "string"}},
                "additionalProperties": False,
            },
            side_effect_class=SideEffectClass.READ,
            idempotent=True,
            sandbox_live_allowed=True,
            person_records=CRM_PEOPLE,
        ),
        Capability(
            capability_id="crm.find_by_phone",
            description="Find customers by phone number (phone numbers are not unique).",
            schema_={
                "type": "object",
                "required": ["phone"],
                "properties": {"phone": {"type": "string"}},
                "additionalProperties": False,
            },
            side_effect_class=SideEffectClass.READ,
            idempotent=True,
            personal_fields=("phone",),
            person_records=CRM_PEOPLE,
        ),
        Capability(
            capability_id="payment.refund",
            description="Refund an order to the original payment method.",
            schema_={
                "type": "object",
                "required": ["order_id", "amount", "currency"],
                "properties": {
                    "order_id": {"type": "string"},
                    "amount": {"type": "number", "exclusiveMinimum": 0},
                    "currency": {"type": "string", "enum": ["EUR"]},
                },
                "additionalProperties": False,
            },
            side_effect_class=SideEffectClass.WRITE,
            idempotent=True,
            reconciler="payment",
        ),
        Capability(
            capability_id="email.send",
            description="Send an email to a customer.",
            schema_={
                "type": "object",
                "required": ["to", "subject", "body"],
                "properties": {
                    "to": {"type": "string"},
                    "subject": {"type": "string"},
                    "body": {"type": "string"},
                },
                "additionalProperties": False,
            },
            side_effect_class=SideEffectClass.WRITE,
            reconciler="email",
            personal_fields=("to",),
        ),
    ],
)


def _outbound_actions(action: Mapping[str, Any]) -> tuple[PolicyDecision, list[str]]:
    capability, arguments = action["capability"], action["arguments"]
    if capability == "payment.refund":
        amount = float(arguments["amount"])
        if amount > 500:
            return PolicyDecision.DENY, [f"refund of {amount} EUR is above the 500 EUR limit"]
        if amount > 50:
            return PolicyDecision.REQUIRE_APPROVAL, [f"refund of {amount} EUR is above 50 EUR"]
        return PolicyDecision.ALLOW, [f"refund of {amount} EUR is within the 50 EUR limit"]
    if capability == "email.send":
        return PolicyDecision.ALLOW, ["customer communication"]
    return PolicyDecision.DENY, [f"{capability} is not an allowed outbound action"]


POLICIES = PolicySet("support-policies-v3", [Policy(WRITE_POLICY, "v3", _outbound_actions)])

INJECTIONS = PromptInjections(
    system_policy="Refunds above 50 EUR need a supervisor's approval; never refund above 500 EUR.",
    tool_schemas=CAPABILITIES.tool_schemas(),
    skills=("kb.search(query): search ACME's support knowledge base",),
    tenant_config={"tenant": "acme", "currency": "EUR", "language": "en"},
    feature_flags={"refunds_enabled": True},
)


class SimulatedApprover:
    """A supervisor who approves (SIMULATION); ``deny`` makes them refuse."""

    def __init__(self, deny: bool = False, validity: timedelta = timedelta(minutes=15)) -> None:
        self.deny = deny
        self.validity = validity

    async def review(
        self, capability_id: str, arguments: Mapping[str, Any]
    ) -> tuple[str, ApprovalDecision, timedelta]:
        decision = ApprovalDecision.DENIED if self.deny else ApprovalDecision.APPROVED
        return "supervisor@acme (simulated)", decision, self.validity


# steps -------------------------------------------------------------------------------------


def _outcome(state: State) -> dict[str, Any]:
    customer = state.get("customer") or {}
    return {
        "ticket_id": state.get("ticket_id"),
        "customer_id": customer.get("customer_id"),
        "emailed": state.get("email", {}).get("to"),
        "email_status": state.get("email", {}).get("status"),
        "refund_status": state.get("refund", {}).get("status"),
        "resolution": state.get("resolution", "in_progress"),
    }


async def planner(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    response = await env.model.complete(
        "planner",
        [ChatMessage(role="user", content=json.dumps(ticket, sort_keys=True))],
        injections=INJECTIONS,
        state=state,
        seed=env.random.randrange(2**31),
    )
    plan = [c.model_dump(mode="json") for c in response.tool_calls]
    return StepResult({**state, "ticket_id": ticket.get("ticket_id"), "plan": plan}, "search")


def _planned(state: State, name: str) -> dict[str, Any] | None:
    return next((c for c in state["plan"] if c["name"] == name), None)


async def search(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    call = _planned(state, "kb.search")
    chunks = await env.knowledge.search(call["arguments"]["query"], 2) if call else []
    kb = [{"chunk_id": c.chunk_id, "text": c.text} for c in chunks]
    return StepResult({**state, "kb": kb}, "crm")


async def crm(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    lookup = next(c for c in state["plan"] if c["name"].startswith("crm."))
    result = await env.tools.call(lookup["name"], lookup["arguments"], tool_call_id=lookup["id"])
    customers = (
        result.response.get("customers")
        if result.ok and isinstance(result.response, dict)
        else None
    )
    found = customers if isinstance(customers, list) else []
    if not found:
        state = {**state, "customer": None, "resolution": "customer_not_found"}
        return StepResult(state, None, _outcome(state))
    # the first match is taken: with a non-unique key this is where the wrong customer comes in
    return StepResult({**state, "customer": found[0]}, "reviewer")


async def reviewer(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    actions = []
    refund = _planned(state, "payment.refund")
    if refund:
        actions.append({"capability": "payment.refund", "arguments": refund["arguments"]})
    if _planned(state, "email.send"):
        brief = {
            "customer": state["customer"],
            "topic": "your refund" if refund else "your request",
            "facts": [c["text"] for c in state["kb"]],
        }
        reply = await env.model.complete(
            "writer",
            [ChatMessage(role="user", content=json.dumps(brief, sort_keys=True))],
            state=state,
            evidence_refs=[c["chunk_id"] for c in state["kb"]],
            seed=env.random.randrange(2**31),
        )
        draft = json.loads(reply.content or "{}")
        actions.append(
            {"capability": "email.send", "arguments": {"to": state["customer"]["email"], **draft}}
        )
    reviewed = []
    for action in actions:
        decision = await env.policy.decide_action(
            WRITE_POLICY, action["capability"], action["arguments"]
        )
        approval = None
        if decision.decision is PolicyDecision.REQUIRE_APPROVAL:
            approval = (
                await env.approvals.request(action["capability"], action["arguments"])
            ).model_dump(mode="json")
        reviewed.append({**action, "decision": decision.decision.value, "approval": approval})
    state = {**state, "actions": reviewed}
    first = "refund" if refund else "email"
    return StepResult(state, first if reviewed else None, _outcome(state))


async def _execute(
    env: AgentEnvironment, state: State, capability: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    action = next(a for a in state["actions"] if a["capability"] == capability)
    if action["decision"] == PolicyDecision.DENY.value:
        return action, {"status": "DENIED"}
    approval = ApprovalRecord.model_validate(action["approval"]) if action["approval"] else None
    result = await env.tools.call(capability, action["arguments"], approval=approval)
    effect = result.side_effect
    return action, {
        "status": effect.status.value if effect else result.outcome.value,
        "side_effect_id": effect.side_effect_id if effect else None,
    }


async def refund(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    _, outcome = await _execute(env, state, "payment.refund")
    state = {**state, "refund": outcome}
    if outcome["status"] == "UNKNOWN":
        # never retry an UNKNOWN refund: escalate for reconciliation instead
        state = {**state, "resolution": "refund_outcome_unknown_escalated"}
        return StepResult(state, None, _outcome(state))
    has_email = any(a["capability"] == "email.send" for a in state["actions"])
    if not has_email:
        state = {
            **state,
            "resolution": "refunded" if outcome["status"] == "CONFIRMED" else "refund_failed",
        }
    return StepResult(state, "email" if has_email else None, _outcome(state))


async def email(env: AgentEnvironment, state: State, ticket: Any) -> StepResult:
    action, outcome = await _execute(env, state, "email.send")
    state = {
        **state,
        "email": {**outcome, "to": action["arguments"]["to"]},
        "resolution": "replied",
    }
    return StepResult(state, None, _outcome(state))


SUPPORT_DESK_V1 = GraphDefinition(
    graph_id=GRAPH_ID,
    version="1",
    entry="planner",
    steps={
        "planner": planner,
        "search": search,
        "crm": crm,
        "reviewer": reviewer,
        "refund": refund,
        "email": email,
    },
    description="Planner → Search → CRM → Reviewer → Refund and/or Email",
)

GRAPHS = GraphRegistry()
GRAPHS.register(SUPPORT_DESK_V1)

SCENARIOS: dict[str, dict[str, Any]] = {
    "happy": {
        "ticket_id": "T-1001",
        "customer_id": "C-1001",
        "phone": "+1-555-0100",
        "order_id": "O-1001",
        "amount": 80,
        "message": "My order O-1001 arrived broken, please refund it.",
    },
    "wrong-customer": {
        "ticket_id": "T-2002",
        "customer_id": "C-2002",
        "phone": "+1-555-0199",
        "message": "Please send me my latest invoice by email.",
    },
    "refund-timeout": {
        "ticket_id": "T-3003",
        "customer_id": "C-3003",
        "phone": "+1-555-0300",
        "order_id": "O-3003",
        "amount": 30,
        "message": "Please refund order O-3003, I returned it last week.",
    },
}
