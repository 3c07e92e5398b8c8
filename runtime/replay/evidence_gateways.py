"""Replay flavours of retrieval and approvals: the recorded evidence sets and approvals, or
(as counterfactuals) a candidate retriever and a refused approval."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from models import ApprovalDecision, ApprovalRecord, ExecutionEventType, FixtureMissPolicy
from models.errors import FixtureMissError
from runtime.approvals import action_hash
from runtime.knowledge import RetrievedChunk, Retriever, query_hash
from runtime.ports import ArtifactStore
from runtime.recorder import RunRecorder
from runtime.replay.gateways import StepLedger
from runtime.replay.source import ReplaySource

E = ExecutionEventType


class ReplayKnowledgeGateway:
    def __init__(
        self,
        source: ReplaySource,
        artifacts: ArtifactStore,
        recorder: RunRecorder,
        positions: StepLedger,
        retriever: Retriever | None,
        miss_policy: FixtureMissPolicy,
    ) -> None:
        self.source = source
        self.artifacts = artifacts
        self.recorder = recorder
        self.positions = positions
        self.retriever = retriever
        self.miss_policy = miss_policy

    async def search(self, query: str, k: int = 3) -> list[RetrievedChunk]:
        from runtime.knowledge import RecordingKnowledgeGateway

        if self.retriever is not None:  # a retriever counterfactual queries the candidate retriever
            return await RecordingKnowledgeGateway(self.retriever, self.recorder).search(query, k)
        qhash = query_hash(query, k)
        used = self.positions.retrievals.get(qhash, 0)
        fixture = self.source.retrieval(qhash, used)
        if fixture is None:  # never recorded, or every recorded answer consumed
            self.positions.fixture_misses += 1
            await self.recorder.record(
                E.FIXTURE_MISS,
                payload={
                    "capability_id": "knowledge.search",
                    "request_hash": qhash,
                    "policy": self.miss_policy.value,
                },
            )
            if self.miss_policy is FixtureMissPolicy.FAIL:
                raise FixtureMissError(
                    f"no recorded retrieval for query {qhash}", capability_id="knowledge.search"
                )
            return []
        self.positions.retrievals[qhash] = used + 1
        chunks = []
        for item in fixture.evidence:
            text = (await self.artifacts.get(item.chunk_hash)).decode()
            chunks.append(
                RetrievedChunk(
                    item.document_id, item.document_version, item.chunk_id, text, item.score
                )
            )
        await self.recorder.record(
            E.RETRIEVAL,
            record=fixture.model_copy(
                update={"run_id": self.recorder.run_id, "step_id": self.recorder.step_id}
            ),
        )
        return chunks


class ReplayApprovalGateway:
    """Recorded approvals by action hash; ``deny`` replays "what if the approver had refused"."""

    def __init__(
        self, source: ReplaySource, recorder: RunRecorder, deny: tuple[str, ...] = ()
    ) -> None:
        self.source = source
        self.recorder = recorder
        self.deny = set(deny)

    async def request(self, capability_id: str, arguments: Mapping[str, Any]) -> ApprovalRecord:
        ahash = action_hash(capability_id, self.recorder.hashing_view(dict(arguments)))
        recorded = self.source.approval(ahash)
        now = self.recorder.logical_time()
        if capability_id in self.deny:
            approval = ApprovalRecord(
                approval_id=f"counterfactual-deny-{ahash[7:23]}",
                approver="counterfactual (replay)",
                action_hash=ahash,
                decision=ApprovalDecision.DENIED,
                approved_at=now,
                expires_at=now + timedelta(minutes=15),
            )
        elif recorded is not None:
            approval = recorded
        else:
            # an action the source never asked approval for: approved in simulation, and marked so
            approval = ApprovalRecord(
                approval_id=f"simulated-{ahash[7:23]}",
                approver="simulated approver (replay)",
                action_hash=ahash,
                approved_at=now,
                expires_at=now + timedelta(minutes=15),
            )
        # a copy in the replay run, under its own id (the source run keeps the original)
        approval = approval.model_copy(
            update={
                "approval_id": f"{self.recorder.run_id}:{approval.approval_id}",
                "run_id": self.recorder.run_id,
                "step_id": self.recorder.step_id,
            }
        )
        await self.recorder.record(E.APPROVAL, record=approval)
        return approval
