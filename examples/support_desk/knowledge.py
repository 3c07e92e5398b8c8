"""A small, versioned knowledge base with a keyword retriever (SIMULATION)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.knowledge import RetrievedChunk

SNAPSHOT = "support-kb-2026-08-01"


@dataclass(frozen=True)
class Document:
    document_id: str
    version: str
    chunks: tuple[str, ...]


DOCUMENTS = (
    Document(
        "refund-policy",
        "7",
        (
            "Damaged or broken deliveries are refunded in full to the original payment method.",
            "Refunds above 50 EUR need a supervisor's approval; above 500 EUR they are refused.",
        ),
    ),
    Document(
        "invoices",
        "3",
        (
            "Invoices are sent by email to the customer's address on file in the CRM.",
            "Always confirm the customer's identity by customer_id before sending account data.",
        ),
    ),
    Document(
        "shipping",
        "12",
        ("Orders ship within two business days; tracking links are emailed when they ship.",),
    ),
)

_WORD = re.compile(r"[a-z]+")


class KeywordRetriever:
    """Scores chunks by shared words with the query: deterministic for a snapshot."""

    version = "keyword-1"
    snapshot = SNAPSHOT

    def __init__(self, documents: tuple[Document, ...] = DOCUMENTS) -> None:
        self.documents = documents

    async def search(self, query: str, k: int) -> list[RetrievedChunk]:
        words = set(_WORD.findall(query.lower()))
        scored = []
        for doc in self.documents:
            for i, text in enumerate(doc.chunks):
                overlap = len(words & set(_WORD.findall(text.lower())))
                if overlap:
                    scored.append((overlap / (1 + len(words)), doc, i, text))
        scored.sort(key=lambda s: (-s[0], s[1].document_id, s[2]))
        return [
            RetrievedChunk(
                doc.document_id, doc.version, f"{doc.document_id}#{i}", text, round(score, 4)
            )
            for score, doc, i, text in scored[:k]
        ]
