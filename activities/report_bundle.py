"""Gathering an incident's ``ReportBundle`` from the stores (``forensics.report`` renders it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from models import (
    AgentFailureType,
    EvidenceRef,
    EvidenceType,
    ExecutionEventType,
    FailureForensicsReport,
    PromptArtifact,
    ReplayResult,
    ReplayStatus,
    ToolFixture,
)
from models.comparison import compare_trajectories
from models.errors import NotFoundError
from models.incident_flow import IncidentView
from models.replay_flow import merge_isolation
from models.report_bundle import FailureSummary, PendingTask, ReportBundle, TimelineEntry
from stores.bundle import Stores
from stores.sql.incidents import SqlIncidentStore
from stores.sql.trajectory import load_trajectory


async def replay_isolation(ledger: Any, replay_id: str, runs: int | None) -> str | None:
    """The isolation every step of a replay (each of its ``runs`` repeats) recorded when it
    started; a weaker one on any step shows (``merge_isolation``)."""
    ids = [f"{replay_id}-{n:03d}" for n in range(runs)] if (runs or 1) > 1 else [replay_id]
    isolation = None
    for run_id in ids:
        try:
            started = await ledger.events_with_payloads(
                run_id, types=frozenset({ExecutionEventType.STEP_STARTED})
            )
        except NotFoundError:
            continue
        for _, payload in started:
            isolation = merge_isolation(isolation, json.loads(payload or b"{}").get("isolation"))
    return isolation


async def report_bundle(stores: Stores, view: IncidentView) -> ReportBundle:
    run_id = view.source_run_id
    verification = await stores.ledger.verify(run_id)
    evidence = [
        EvidenceRef(
            type=EvidenceType.EVENT,
            ref=f"{run_id}#1-{verification.event_count}",
            content_hash=verification.head_hash,
        )
    ]
    for prompt in await stores.evidence.records(PromptArtifact, run_id):
        evidence.append(
            EvidenceRef(
                type=EvidenceType.PROMPT, ref=prompt.artifact_id, content_hash=prompt.content_ref
            )
        )
    for fixture in await stores.evidence.records(ToolFixture, run_id):
        evidence.append(
            EvidenceRef(
                type=EvidenceType.TOOL_FIXTURE,
                ref=f"{fixture.capability_id}:{fixture.tool_call_id}",
                content_hash=fixture.record_hash(),
            )
        )
    replays = [
        ReplayResult(
            replay_id=r.replay_id,
            mode=r.mode,
            status=ReplayStatus(r.status),
            confidence=r.confidence,
            reproduced=r.reproduced,
            runs=r.runs,
            rate=r.rate,
            isolation=await replay_isolation(stores.ledger, r.replay_id, r.runs),
        )
        for r in view.replays
    ]
    source = await load_trajectory(stores.ledger, run_id)
    shown = next(
        (r for r in view.replays if r.label != "exact"), view.replays[0] if view.replays else None
    )
    replay_trajectory = comparison = None
    if shown is not None:
        child = f"{shown.replay_id}-000" if (shown.runs or 1) > 1 else shown.replay_id
        try:
            replay_trajectory = await load_trajectory(stores.ledger, child)
            comparison = compare_trajectories(source, replay_trajectory)
        except NotFoundError:
            replay_trajectory = None
    confirmation = view.confirmation
    report = FailureForensicsReport(
        incident_id=view.incident_id,
        source_run_id=run_id,
        failure_signature=view.signature.signature if view.signature else "UNSIGNED",
        evidence=tuple(evidence),
        replays=tuple(replays),
        critical_diffs=tuple(d for d in comparison.diffs if d.critical) if comparison else (),
        confirmed_root_cause=confirmation.root_cause if confirmation else None,
        fix_version=confirmation.fix_version if confirmation else None,
        verified_by=confirmation.verified_by if confirmation else None,
        generated_at=datetime.now(UTC),
    )
    cases = []
    if view.regression_case_id:
        try:
            cases.append(await SqlIncidentStore(stores.db).get_case(view.regression_case_id))
        except NotFoundError:
            pass
    return ReportBundle(
        report=report,
        source=source,
        replay=replay_trajectory,
        comparison=comparison,
        replay_labels={r.replay_id: r.label for r in view.replays},
        timeline=tuple(
            TimelineEntry(phase=t.phase, at=t.at, detail=t.detail) for t in view.timeline
        ),
        classification=FailureSummary(
            failure_type=AgentFailureType(view.signature.failure_type),
            signature=view.signature.signature,
            explanation=view.signature.explanation,
        )
        if view.signature
        else None,
        regression_case_ids=(view.regression_case_id,) if view.regression_case_id else (),
        regression_cases=tuple(cases),
        pending=tuple(
            PendingTask(kind=p.kind.upper(), subject=p.side_effect_id, detail=p.detail)
            for p in view.pending
        ),
    )
