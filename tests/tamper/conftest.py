"""A recorded run with every kind of evidence, and the attacker's tools: raw SQL on the database
(foreign keys bypassed, as the owner of the database can), write access to the artifact
directory and to the anchor directory (not to the anchor signing key)."""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text

from models import (
    ApprovalRecord,
    ExecutionEventType,
    PolicyDecision,
    PolicyDecisionRecord,
    PromptArtifact,
    ReplayCheckpoint,
    RunRecord,
    RunStatus,
    SideEffectRecord,
    SideEffectStatus,
    ToolFixture,
    ToolOutcome,
)
from models.canonical import canonical_hash
from models.digest import sha256_digest
from stores.anchor_signing import AnchorKeys
from stores.anchors import AnchorLog, open_anchor_log
from stores.artifacts import LocalArtifactStore
from stores.case_signing import CaseSigningKey
from stores.sql.database import Database
from stores.sql.ledger import NewEvent, SqlLedger

T0 = datetime(2026, 11, 3, 9, 0, tzinfo=UTC)
#: the anchor signing key (the attacker does not hold it)
ANCHOR_KEYS = AnchorKeys.of(CaseSigningKey(Ed25519PrivateKey.generate(), "test"))
E = ExecutionEventType


@dataclass
class Recorded:
    ledger: SqlLedger
    artifacts: LocalArtifactStore
    anchors: AnchorLog
    database: Database
    run_id: str
    side_effect_id: str
    approval_id: str
    #: digest of the artifact-stored (over 64 KiB) tool fixture payload
    big_payload: str
    #: digest of the checkpoint's state, an artifact the chained events point to
    state_ref: str
    events: int

    async def sql(self, statement: str, **params: Any) -> None:
        """Run ``statement`` as the database's owner would: no foreign keys in the way."""
        if self.database.is_postgresql:
            async with self.database.transaction() as conn:
                await conn.execute(text("SET LOCAL session_replication_role = replica"))
                await conn.execute(text(statement), params)
            return
        path = self.database.engine.url.database
        assert path is not None
        # SQLAlchemy's own text form of an instant in SQLite
        params = {
            k: v.strftime("%Y-%m-%d %H:%M:%S.%f") if isinstance(v, datetime) else v
            for k, v in params.items()
        }
        with sqlite3.connect(path) as conn:  # foreign keys are off in a plain connection
            conn.execute(statement, params)

    def artifact_path(self, digest: str) -> Path:
        return self.artifacts.path_for(digest)


@pytest.fixture
async def recorded(database: Database, tmp_path: Path) -> Recorded:
    artifacts = LocalArtifactStore(tmp_path / "artifacts")
    anchors = open_anchor_log(LocalArtifactStore(tmp_path / "anchors"), ANCHOR_KEYS)
    ledger = SqlLedger(database, artifacts, anchors=anchors, group_commit=False)
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="support-desk", graph_version="1", created_at=T0)
    )
    at = iter(T0 + timedelta(seconds=i) for i in range(100))
    prompt_text = b"You are a support agent. Prefer customer_id."
    state = b'{"ticket":"T-1","step":"refund"}'
    prompt_ref = await artifacts.put(prompt_text)
    state_ref = await artifacts.put(state)
    action = canonical_hash({"capability": "payment.refund", "amount": 120})
    big = {"rows": ["x" * 100] * 800}  # ~80 KiB: stored in the artifact store
    se_id = f"se-{uuid.uuid4().hex[:16]}"
    ap_id = f"ap-{uuid.uuid4().hex[:16]}"
    records = [
        NewEvent("start", E.RUN_STARTED, next(at), payload={"input": "refund please"}),
        NewEvent(
            "answer",
            E.PROMPT_COMPILED,
            next(at),
            record=PromptArtifact(
                artifact_id=f"pa-{uuid.uuid4().hex[:12]}",
                template_version="v17",
                compiled_hash=sha256_digest(prompt_text),
                content_ref=prompt_ref,
                token_count=9,
                compiled_at=T0,
            ),
        ),
        NewEvent(
            "lookup",
            E.TOOL_CALL,
            next(at),
            record=ToolFixture(
                tool_call_id="tc-1",
                capability_id="crm.search",
                request_hash=canonical_hash({"phone": "+1-555-0199"}),
                sanitized_request={"phone": "+1-555-0199"},
                sanitized_response=big,
                outcome=ToolOutcome.SUCCESS,
                started_at=T0,
            ),
        ),
        NewEvent(
            "refund",
            E.POLICY_DECISION,
            next(at),
            record=PolicyDecisionRecord(
                policy_id="refunds",
                policy_version="refunds-v3",
                input_hash=action,
                sanitized_input={"amount": 120},
                decision=PolicyDecision.REQUIRE_APPROVAL,
            ),
        ),
        NewEvent(
            "refund",
            E.APPROVAL,
            next(at),
            record=ApprovalRecord(
                approval_id=ap_id,
                approver="lead@example.com",
                action_hash=action,
                approved_at=T0,
                expires_at=T0 + timedelta(hours=1),
            ),
        ),
        NewEvent(
            "refund",
            E.SIDE_EFFECT,
            next(at),
            record=SideEffectRecord(
                side_effect_id=se_id,
                run_id=run_id,
                step_id="refund",
                capability_id="payment.refund",
                idempotency_key=f"idem-{se_id}",
                action_hash=action,
                status=SideEffectStatus.EXECUTING,
            ),
        ),
        NewEvent(
            "refund",
            E.SIDE_EFFECT,
            next(at),
            record=SideEffectRecord(
                side_effect_id=se_id,
                run_id=run_id,
                step_id="refund",
                capability_id="payment.refund",
                idempotency_key=f"idem-{se_id}",
                action_hash=action,
                status=SideEffectStatus.UNKNOWN,
            ),
        ),
        NewEvent(
            "refund",
            E.CHECKPOINT,
            next(at),
            record=ReplayCheckpoint(
                run_id=run_id,
                step_id="refund",
                sequence=7,
                state_ref=state_ref,
                state_hash=sha256_digest(state),
                logical_time=T0,
            ),
        ),
        NewEvent("end", E.RUN_COMPLETED, next(at), payload={"outcome": "escalated"}),
    ]
    for event in records:
        await ledger.append(run_id, event)
    await ledger.finish_run(run_id, RunStatus.COMPLETED, "escalated")
    verification = await ledger.verify(run_id)
    assert verification.intact, verification.summary()
    assert verification.checked["payloads"] == len(records)
    assert verification.checked["projections"] == 6
    assert verification.checked["artifacts"] == 2
    assert verification.checked["anchors"] == 1
    return Recorded(
        ledger=ledger,
        artifacts=artifacts,
        anchors=anchors,
        database=database,
        run_id=run_id,
        side_effect_id=se_id,
        approval_id=ap_id,
        big_payload=records[2].record.record_hash(),  # type: ignore[union-attr]
        state_ref=state_ref,
        events=len(records),
    )
