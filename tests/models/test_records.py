"""Every seed record: immutable, unknown fields refused, schema-versioned, lossless JSON."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from pydantic import ValidationError

import models as m
from models.canonical import canonical_hash

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
H = canonical_hash({"x": 1})

SAMPLES: list[m.Record] = [
    m.ReplayManifest(
        replay_id="replay-882",
        source_run_id="run-9182",
        source_run_version="1",
        model_profile="gpt-x@2026-08",
        prompt_bundle_hash=H,
        graph_version="support-desk@3",
        policy_version="refunds-v3",
        capability_registry_version="2026.11",
        knowledge_snapshot="kb-2026-08-20",
        evaluator_version="eval-2",
        logical_time=T0,
        environment_hash=H,
        mode=m.ReplayMode.PROMPT_SWAP,
    ),
    m.ToolFixture(
        tool_call_id="call-1",
        capability_id="crm.lookup",
        request_hash=H,
        sanitized_request={"phone": "***", "n": [1, 2.5, None, True]},
        sanitized_response={"customer_id": "C-1"},
        outcome=m.ToolOutcome.SUCCESS,
        started_at=T0,
        completed_at=T0 + timedelta(milliseconds=120),
        provider_request_id="req-1",
    ),
    m.SideEffectRecord(
        side_effect_id="se-1",
        run_id="run-1",
        step_id="refund",
        capability_id="payment.refund",
        idempotency_key="idem-1",
        action_hash=H,
        status=m.SideEffectStatus.UNKNOWN,
        provider_receipt=None,
        executed_at=T0,
    ),
    m.PromptArtifact(
        artifact_id="p-1",
        template_version="v17",
        compiled_hash=H,
        content_ref=H,
        token_count=812,
        compiled_at=T0,
    ),
    m.ContextSnapshot(
        snapshot_id="ctx-1",
        run_id="run-1",
        step_id="planner",
        message_refs=("m1", "m2"),
        evidence_refs=("kb:doc-1#3",),
        memory_refs=(),
        tool_catalog_hash=H,
        state_hash=H,
        content_hash=H,
    ),
    m.RetrievalFixture(
        query_hash=H,
        retriever_version="bm25-2",
        evidence=(
            m.RetrievedEvidence(
                document_id="doc-1",
                document_version="7",
                chunk_id="c3",
                chunk_hash=H,
                rank=0,
                score=0.83,
            ),
        ),
    ),
    m.PolicyDecisionRecord(
        policy_id="refund-limit",
        policy_version="v9",
        input_hash=H,
        sanitized_input={"amount": 120},
        decision=m.PolicyDecision.REQUIRE_APPROVAL,
        reasons=("amount above 100",),
    ),
    m.ApprovalRecord(
        approval_id="a-1",
        approver="lead@acme",
        action_hash=H,
        approved_at=T0,
        expires_at=T0 + timedelta(minutes=30),
    ),
    m.ExecutionEvent(
        sequence=1,
        event_id="e-1",
        run_id="run-1",
        step_id="planner",
        type=m.ExecutionEventType.MODEL_CALL,
        payload_ref="inline",
        payload_hash=H,
        previous_hash=H,
        hash=H,
        logical_time=T0,
        recorded_at=T0 + timedelta(days=4),
    ),
    m.ReplayCheckpoint(
        run_id="run-1",
        step_id="s",
        sequence=4,
        state_ref=H,
        state_hash=H,
        context_snapshot_id="ctx-1",
        logical_time=T0,
    ),
    m.EnvironmentManifest(
        python_version="3.11.7", dependency_lock_hash=H, tool_bundle_hash=H, os_image="debian-12"
    ),
    m.SourceCodeManifest(base_commit="a" * 40, head_commit="b" * 40, working_tree_patch_hash=H),
    m.ArtifactRef(artifact_id="report.csv", version=2, content_hash=H),
    m.EvidenceFreezeRequest(
        run_id="run-1",
        incident_id="INC-2026-081",
        types=(m.EvidenceType.TOOL_FIXTURE, m.EvidenceType.EVENT, m.EvidenceType.EVENT),
        retention_until=T0 + timedelta(days=365),
    ),
    m.ReplayBudget(
        max_model_calls=20,
        max_tokens=100_000,
        max_cost=Decimal("3.0"),
        max_duration=timedelta(minutes=5),
    ),
    m.ReplayRequest(
        source_run_id="run-9182",
        mode=m.ReplayMode.FORK_FROM_STEP,
        start_from_step="planner-4",
        budget=m.ReplayBudget(max_model_calls=20, max_cost=Decimal("3.0")),
        deny_approvals=("payment.refund",),
    ),
    m.ReplayComparison(
        same_outcome=False,
        same_tool_sequence=False,
        same_side_effects=False,
        answer_similarity=0.42,
        diffs=(
            m.TrajectoryDiff(
                type=m.DiffType.SIDE_EFFECT_ADDED,
                source_step=None,
                replay_step="refund",
                explanation="replay refunds, source did not",
                critical=True,
            ),
        ),
        first_divergent_step="planner",
    ),
    m.FailureForensicsReport(
        incident_id="INC-1",
        source_run_id="run-1",
        failure_signature="SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE",
        evidence=(m.EvidenceRef(type=m.EvidenceType.EVENT, ref="run-1#3", content_hash=H),),
        replays=(
            m.ReplayResult(
                replay_id="r-1",
                mode=m.ReplayMode.PROMPT_SWAP,
                status=m.ReplayStatus.COMPLETED,
                confidence=m.ReplayConfidence.FULL,
                reproduced=0,
                runs=50,
                rate=0.0,
            ),
        ),
        confirmed_root_cause="prompt v17 does not prefer customer_id",
        fix_version="v18",
        verified_by="oncall",
    ),
    m.RunRecord(
        run_id="run-1",
        graph_id="support-desk",
        graph_version="3",
        created_at=T0,
        pinned=m.PinnedVersions(model_profile="scripted@1", prompt_bundle_hash=H),
        outcome={"status": "resolved"},
    ),
]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_json_round_trip_is_lossless(record: m.Record) -> None:
    text = record.model_dump_json()
    again = type(record).model_validate_json(text)
    assert again == record
    assert again.model_dump_json() == text


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_records_are_immutable_and_refuse_unknown_fields(record: m.Record) -> None:
    field = next(iter(type(record).model_fields))
    with pytest.raises(ValidationError):
        setattr(record, field, getattr(record, field))
    with pytest.raises(ValidationError, match="extra"):
        type(record).model_validate({**record.model_dump(), "surprise": 1})


def test_hashed_records_carry_a_schema_version_and_hash_stably() -> None:
    hashed = [r for r in SAMPLES if isinstance(r, m.HashedRecord)]
    assert len(hashed) >= 10
    for record in hashed:
        assert record.model_dump()["schema_version"] == 1
        assert (
            record.record_hash()
            == type(record).model_validate_json(record.model_dump_json()).record_hash()
        )


def test_every_seed_record_and_enum_exists() -> None:
    for name in (
        "ReplayManifest ReplayMode ToolFixture ToolOutcome FixtureMissPolicy SideEffectRecord "
        "SideEffectStatus PromptArtifact ContextSnapshot RetrievalFixture RetrievedEvidence "
        "PolicyDecisionRecord ApprovalRecord ExecutionEvent ExecutionEventType ReplayCheckpoint "
        "EnvironmentManifest SourceCodeManifest ArtifactRef EvidenceFreezeRequest EvidenceType "
        "ReplayBudget ReplayStatus ReplayRequest ReplayComparison TrajectoryDiff DiffType "
        "AgentFailureType FailureForensicsReport RetentionClass"
    ).split():
        assert hasattr(m, name), name
    assert [s.value for s in m.SideEffectStatus] == [
        "PLANNED",
        "EXECUTING",
        "CONFIRMED",
        "FAILED",
        "UNKNOWN",
        "RECONCILED",
    ]
    assert [s.value for s in m.ReplayStatus] == [
        "CREATED",
        "PREPARING",
        "RUNNING",
        "COMPARING",
        "COMPLETED",
        "FAILED",
        "CANCELED",
    ]
    assert {"EXACT", "MODEL_SWAP", "PROMPT_SWAP", "FORK_FROM_STEP"} <= {
        x.value for x in m.ReplayMode
    }
    assert [x.value for x in m.FixtureMissPolicy] == ["FAIL", "STUB", "SANDBOX_LIVE"]
    assert {
        "MODEL_DECISION_CHANGED",
        "TOOL_CHANGED",
        "ARGUMENT_CHANGED",
        "POLICY_CHANGED",
        "OUTCOME_CHANGED",
    } <= {x.value for x in m.DiffType}
    assert [x.value for x in m.AgentFailureType] == [
        "MODEL_DECISION",
        "PROMPT",
        "RETRIEVAL",
        "TOOL",
        "AUTHORITY",
        "APPROVAL",
        "SIDE_EFFECT",
        "STATE",
        "CONCURRENCY",
        "INFRASTRUCTURE",
        "POLICY",
        "DATA",
    ]


def test_instants_need_a_time_zone_and_are_normalised_to_utc() -> None:
    base = SAMPLES[3].model_dump()
    with pytest.raises(ValidationError, match="timezone"):
        m.PromptArtifact.model_validate({**base, "compiled_at": datetime(2026, 8, 20, 10, 15)})
    cet = timezone(timedelta(hours=2))
    local = m.PromptArtifact.model_validate(
        {**base, "compiled_at": datetime(2026, 8, 20, 12, 15, tzinfo=cet)}
    )
    assert local == SAMPLES[3]
    assert local.record_hash() == SAMPLES[3].record_hash()


def test_digests_are_validated() -> None:
    base = SAMPLES[3].model_dump()
    with pytest.raises(ValidationError, match="compiled_hash"):
        m.PromptArtifact.model_validate({**base, "compiled_hash": "md5:abc"})


def test_freeze_request_types_are_a_sorted_set() -> None:
    request = SAMPLES[13]
    assert isinstance(request, m.EvidenceFreezeRequest)
    assert request.types == (m.EvidenceType.EVENT, m.EvidenceType.TOOL_FIXTURE)


def test_comparison_is_critical_when_a_diff_is() -> None:
    comparison = SAMPLES[16]
    assert isinstance(comparison, m.ReplayComparison)
    assert comparison.critical
    assert not comparison.model_copy(update={"diffs": ()}).critical
