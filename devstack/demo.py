"""``make demo`` until the incident demo exists: record a sample run and verify its chain.

The run is a short support-desk exchange written event by event through the real ledger:
the compiled prompt (text in the artifact store), the context snapshot, a model call, a CRM
lookup fixture, a policy decision, an approval, an email side effect PLANNED → EXECUTING →
CONFIRMED, a checkpoint and the outcome.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import JsonValue

from models import (
    ApprovalRecord,
    ContextSnapshot,
    ExecutionEventType,
    PinnedVersions,
    PolicyDecision,
    PolicyDecisionRecord,
    PromptArtifact,
    ReplayCheckpoint,
    RunRecord,
    RunStatus,
    SideEffectClass,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash, canonicalize
from stores.bundle import Stores, open_stores
from stores.sql.ledger import NewEvent
from worker.settings import Settings

E = ExecutionEventType


async def record_sample_run(stores: Stores, run_id: str, start: datetime) -> None:
    """Record the sample run ``run_id`` with logical times from ``start``."""
    tick = iter(range(1, 1000))

    def at() -> datetime:
        return start + timedelta(seconds=next(tick))

    prompt_text = (
        b"You are the support desk agent of ACME.\nSystem policy: never refund above 100 EUR.\n"
        b"Tools: crm.lookup(customer_id), email.send(to, subject, body)\n"
    )
    prompt_ref = await stores.artifacts.put(prompt_text)
    # the checkpoint's state is stored too: verification reads back every referenced artifact
    await stores.artifacts.put(canonicalize({"done": True}))
    request: dict[str, JsonValue] = {"customer_id": "C-1001"}
    email = {"to": "ada@example.com", "subject": "Your ticket", "body": "We fixed it."}
    action_hash = canonical_hash({"capability": "email.send", "arguments": email})
    await stores.ledger.create_run(_sample_run_record(run_id, start, prompt_ref))
    events = [
        NewEvent("start", E.RUN_STARTED, at(), payload={"input": "My order arrived broken"}),
        *_planner_events(run_id, start, at, prompt_text, prompt_ref, request),
        *_review_events(run_id, start, at, email, action_hash),
        *_email_events(run_id, start, at, action_hash),
        NewEvent("end", E.RUN_COMPLETED, at(), payload={"outcome": "resolved"}),
    ]
    for event in events:
        await stores.ledger.append(run_id, event)
    await stores.ledger.finish_run(run_id, RunStatus.COMPLETED, "resolved")


def _sample_run_record(run_id: str, start: datetime, prompt_ref: str) -> RunRecord:
    """The sample run's header: its graph and pinned versions."""
    return RunRecord(
        run_id=run_id,
        graph_id="sample-support-desk",
        graph_version="1",
        created_at=start,
        pinned=PinnedVersions(
            model_profile="scripted-demo@1",
            prompt_bundle_hash=prompt_ref,
            policy_version="refunds-v3",
            capability_registry_version="2026.11",
            knowledge_snapshot="kb-2026-11-01",
            redaction_policy_version="redact-v1",
        ),
    )


def _planner_events(
    run_id: str,
    start: datetime,
    at: Callable[[], datetime],
    prompt_text: bytes,
    prompt_ref: str,
    request: dict[str, JsonValue],
) -> list[NewEvent]:
    """The planner's compiled prompt, context snapshot and model call, then the CRM lookup."""
    return [
        NewEvent(
            "planner",
            E.PROMPT_COMPILED,
            at(),
            record=PromptArtifact(
                artifact_id=f"{run_id}-prompt-1",
                template_version="support-v17",
                compiled_hash=prompt_ref,
                content_ref=prompt_ref,
                token_count=len(prompt_text.split()),
                compiled_at=start,
            ),
        ),
        NewEvent(
            "planner",
            E.CONTEXT_SNAPSHOT,
            at(),
            record=ContextSnapshot(
                snapshot_id=f"{run_id}-ctx-1",
                run_id=run_id,
                step_id="planner",
                message_refs=("msg-1",),
                tool_catalog_hash=canonical_hash(["crm.lookup", "email.send"]),
                state_hash=canonical_hash({}),
                content_hash=canonical_hash({"messages": ["My order arrived broken"]}),
            ),
        ),
        NewEvent(
            "planner", E.MODEL_CALL, at(), payload={"decision": "crm.lookup", "arguments": request}
        ),
        NewEvent(
            "crm",
            E.TOOL_CALL,
            at(),
            record=ToolFixture(
                tool_call_id="call-1",
                capability_id="crm.lookup",
                request_hash=canonical_hash({"name": "crm.lookup", "arguments": request}),
                sanitized_request=request,
                sanitized_response={"customer_id": "C-1001", "email": "a***@example.com"},
                outcome=ToolOutcome.SUCCESS,
                started_at=start,
                completed_at=start,
                side_effect_class=SideEffectClass.READ,
                run_id=run_id,
                step_id="crm",
            ),
        ),
    ]


def _review_events(
    run_id: str,
    start: datetime,
    at: Callable[[], datetime],
    email: dict[str, str],
    action_hash: str,
) -> list[NewEvent]:
    """The reviewer's policy decision (approval required) and the approval of the email."""
    return [
        NewEvent(
            "reviewer",
            E.POLICY_DECISION,
            at(),
            record=PolicyDecisionRecord(
                policy_id="outbound-email",
                policy_version="refunds-v3",
                input_hash=canonical_hash(email),
                sanitized_input={"to": "a***@example.com"},
                decision=PolicyDecision.REQUIRE_APPROVAL,
                reasons=("outbound email to a customer",),
                run_id=run_id,
                step_id="reviewer",
            ),
        ),
        NewEvent(
            "reviewer",
            E.APPROVAL,
            at(),
            record=ApprovalRecord(
                approval_id=f"{run_id}-approval-1",
                approver="oncall@acme",
                action_hash=action_hash,
                approved_at=start,
                expires_at=start + timedelta(minutes=30),
                run_id=run_id,
                step_id="reviewer",
            ),
        ),
    ]


def _email_events(
    run_id: str, start: datetime, at: Callable[[], datetime], action_hash: str
) -> list[NewEvent]:
    """The email side effect PLANNED → EXECUTING → CONFIRMED, then the checkpoint after it."""
    side_effect = SideEffectRecord(
        side_effect_id=f"{run_id}-se-1",
        run_id=run_id,
        step_id="email",
        capability_id="email.send",
        idempotency_key=canonical_hash({"run": run_id, "step": "email", "action": action_hash}),
        action_hash=action_hash,
        status=SideEffectStatus.PLANNED,
    )
    return [
        NewEvent("email", E.SIDE_EFFECT, at(), record=side_effect),
        NewEvent(
            "email",
            E.SIDE_EFFECT,
            at(),
            record=side_effect.model_copy(update={"status": SideEffectStatus.EXECUTING}),
        ),
        NewEvent(
            "email",
            E.SIDE_EFFECT,
            at(),
            record=side_effect.model_copy(
                update={
                    "status": SideEffectStatus.CONFIRMED,
                    "provider_receipt": "msg-77",
                    "executed_at": start,
                }
            ),
        ),
        NewEvent(
            "email",
            E.CHECKPOINT,
            at(),
            record=ReplayCheckpoint(
                run_id=run_id,
                step_id="email",
                sequence=10,
                state_ref=canonical_hash({"done": True}),
                state_hash=canonical_hash({"done": True}),
                logical_time=start,
            ),
        ),
    ]


async def run_demo(settings: Settings, echo: Callable[[str], None] = print) -> str:
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    async with open_stores(settings.stores) as stores:
        echo(f"database: {settings.stores.database_url}")
        echo(f"artifacts: {stores.artifacts.location}")
        await record_sample_run(stores, run_id, datetime(2026, 8, 20, 10, 15, tzinfo=UTC))
        echo(f"recorded {run_id}")
        result = await stores.ledger.verify(run_id)
        echo(f"verify {run_id}: {result.summary()}")
        if not result.intact:
            raise SystemExit(1)
    echo(f"next: .venv/bin/replaybook runs show {run_id}")
    return run_id
