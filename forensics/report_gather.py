"""Gathering an incident's ``ReportBundle`` from the evidence (``forensics.report`` renders it)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Protocol

from forensics.side_effect_truth import side_effect_truths
from models import (
    AgentFailureType,
    EvidenceRef,
    EvidenceType,
    ExecutionEventType,
    FailureForensicsReport,
    PromptArtifact,
    ReplayComparison,
    ReplayMode,
    ReplayResult,
    ReplayStatus,
    ToolFixture,
)
from models.comparison import compare_trajectories
from models.comparison_evidence import prompt_drift_diffs
from models.errors import NotFoundError
from models.incident_flow import IncidentView
from models.regression import RegressionCase
from models.replay import TrajectoryDiff
from models.replay_flow import merge_isolation
from models.report_bundle import FailureSummary, PendingTask, ReportBundle, TimelineEntry
from models.trajectory import Trajectory
from runtime.ports import EventLedger, EvidenceReader
from runtime.trajectory import load_trajectory

#: the errors a replay worker records when it refused or stopped a sandboxed step
SANDBOX_REFUSALS = frozenset({"SandboxViolationError", "SandboxQuotaError"})


async def replay_isolation(ledger: Any, replay_id: str, runs: int | None) -> str | None:
    """The isolation every step of a replay (each of its ``runs`` repeats) recorded when it
    started; a weaker one on any step shows (``merge_isolation``), and so does anything the
    sandbox's broker refused it."""
    repeats = runs or 1
    ids = [f"{replay_id}-{n:03d}" for n in range(repeats)] if repeats > 1 else [replay_id]
    isolation = None
    refused: list[str] = []
    for run_id in ids:
        try:
            loaded = await ledger.events_with_payloads(
                run_id,
                types=frozenset({ExecutionEventType.STEP_STARTED, ExecutionEventType.RUN_FAILED}),
            )
        except NotFoundError:
            continue
        for event, payload in loaded:
            data = json.loads(payload or b"{}")
            if event.type is ExecutionEventType.STEP_STARTED:
                isolation = merge_isolation(isolation, data.get("isolation"))
            elif data.get("error") in SANDBOX_REFUSALS:  # recorded by the worker's broker
                refused.append(str(data.get("message")))
    if refused:  # what the sandbox refused shows beside how it isolated the steps
        return f"{isolation or 'not recorded'}; refused: {'; '.join(refused)}"
    return isolation


class CaseReader(Protocol):
    """Where the incident's regression case is read from (the incident store)."""

    async def get_case(self, case_id: str) -> RegressionCase: ...


async def report_bundle(
    ledger: EventLedger,
    evidence_reader: EvidenceReader,
    cases_store: CaseReader,
    view: IncidentView,
) -> ReportBundle:
    """Everything the incident report shows, gathered from the evidence and the replays."""
    run_id = view.source_run_id
    evidence = await _evidence_refs(ledger, evidence_reader, run_id)
    replays = [
        ReplayResult(
            replay_id=r.replay_id,
            mode=r.mode,
            status=ReplayStatus(r.status),
            confidence=r.confidence,
            reproduced=r.reproduced,
            runs=r.runs,
            rate=r.rate,
            inconclusive=r.inconclusive,
            inconclusive_reasons=r.inconclusive_reasons,
            isolation=await replay_isolation(ledger, r.replay_id, r.runs),
        )
        for r in view.replays
    ]
    source = await load_trajectory(ledger, run_id)
    replay_trajectory, comparison = await _shown_replay(ledger, view, source)
    confirmation = view.confirmation
    report = FailureForensicsReport(
        incident_id=view.incident_id,
        source_run_id=run_id,
        failure_signature=view.signature.signature if view.signature else "UNSIGNED",
        # the human's failure type wins; the automatic one is kept beside it
        failure_type=_failure_type(view.failure_type),
        failure_type_confirmed=view.failure_type_confirmed,
        automatic_failure_type=_failure_type(view.automatic_failure_type),
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
            cases.append(await cases_store.get_case(view.regression_case_id))
        except NotFoundError:
            pass
    return ReportBundle(
        report=report,
        source=source,
        replay=replay_trajectory,
        comparison=comparison,
        replay_labels={r.replay_id: r.label for r in view.replays},
        fork_points=view.fork_points,
        fork_results=view.fork_results,
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
        side_effects=await side_effect_truths(ledger, evidence_reader, run_id, view),
        prompt_drifts=await _prompt_drifts(ledger, view),
    )


def _failure_type(value: str | None) -> AgentFailureType | None:
    return AgentFailureType(value) if value else None


async def _prompt_drifts(ledger: EventLedger, view: IncidentView) -> tuple[TrajectoryDiff, ...]:
    """The PROMPT_DRIFT differences of the incident's EXACT replays (their first run: every
    run of one replay sends the same recorded prompts and compiles with the same code)."""
    found: list[TrajectoryDiff] = []
    for replay in view.replays:
        if replay.mode is not ReplayMode.EXACT:
            continue
        child = f"{replay.replay_id}-000" if (replay.runs or 1) > 1 else replay.replay_id
        try:
            trajectory = await load_trajectory(ledger, child)
        except NotFoundError:
            continue
        found += [
            d.model_copy(update={"explanation": f"{child}: {d.explanation}"})
            for d in prompt_drift_diffs(trajectory.prompt_drifts)
        ]
    return tuple(found)


async def _evidence_refs(
    ledger: EventLedger, evidence_reader: EvidenceReader, run_id: str
) -> list[EvidenceRef]:
    """The evidence the report cites: the run's verified chain, its compiled prompts and its
    tool fixtures."""
    verification = await ledger.verify(run_id)
    evidence = [
        EvidenceRef(
            type=EvidenceType.EVENT,
            ref=f"{run_id}#1-{verification.event_count}",
            content_hash=verification.head_hash,
        )
    ]
    for prompt in await evidence_reader.records(PromptArtifact, run_id):
        evidence.append(
            EvidenceRef(
                type=EvidenceType.PROMPT, ref=prompt.artifact_id, content_hash=prompt.content_ref
            )
        )
    for fixture in await evidence_reader.records(ToolFixture, run_id):
        evidence.append(
            EvidenceRef(
                type=EvidenceType.TOOL_FIXTURE,
                ref=f"{fixture.capability_id}:{fixture.tool_call_id}",
                content_hash=fixture.record_hash(),
            )
        )
    return evidence


async def _shown_replay(
    ledger: EventLedger, view: IncidentView, source: Trajectory
) -> tuple[Trajectory | None, ReplayComparison | None]:
    """The replay the report shows beside the source (the first counterfactual, else the
    exact replay; of a repeated one its first run) and its comparison with the source; both
    None when there is none or its run is not found."""
    shown = next(
        (r for r in view.replays if r.label != "exact"), view.replays[0] if view.replays else None
    )
    replay_trajectory = comparison = None
    if shown is not None:
        child = f"{shown.replay_id}-000" if (shown.runs or 1) > 1 else shown.replay_id
        try:
            replay_trajectory = await load_trajectory(ledger, child)
            comparison = compare_trajectories(source, replay_trajectory)
        except NotFoundError:
            replay_trajectory = None
    return replay_trajectory, comparison
