"""The recording knowledge gateway: retrieval is recorded as evidence ids and chunk hashes
(rule 10), and the chunk texts are kept content-addressed so replay can return them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from models import ExecutionEventType, RetrievalFixture, RetrievedEvidence
from models.canonical import canonical_hash
from models.digest import sha256_digest
from runtime.recorder import RunRecorder


@dataclass(frozen=True)
class RetrievedChunk:
    document_id: str
    document_version: str
    chunk_id: str
    text: str
    score: float


class Retriever(Protocol):
    version: str
    snapshot: str

    async def search(self, query: str, k: int) -> list[RetrievedChunk]: ...


def query_hash(query: str, k: int) -> str:
    return canonical_hash({"query": query, "k": k})


class RecordingKnowledgeGateway:
    def __init__(self, retriever: Retriever, recorder: RunRecorder) -> None:
        self.retriever = retriever
        self.recorder = recorder

    async def search(self, query: str, k: int = 3) -> list[RetrievedChunk]:
        chunks = await self.retriever.search(query, k)
        evidence = []
        for rank, chunk in enumerate(chunks):
            data = chunk.text.encode()
            await self.recorder.put_artifact(data)
            evidence.append(
                RetrievedEvidence(
                    document_id=chunk.document_id,
                    document_version=chunk.document_version,
                    chunk_id=chunk.chunk_id,
                    chunk_hash=sha256_digest(data),
                    rank=rank,
                    score=chunk.score,
                )
            )
        fixture = RetrievalFixture(
            query_hash=query_hash(query, k),
            retriever_version=self.retriever.version,
            evidence=tuple(evidence),
            run_id=self.recorder.run_id,
            step_id=self.recorder.step_id,
        )
        await self.recorder.record(ExecutionEventType.RETRIEVAL, record=fixture)
        return chunks
