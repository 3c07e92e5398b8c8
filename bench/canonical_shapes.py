"""Document shapes for the canonical-form bench (``bench.bench_canonical``): what real payloads
look like, not only the bench's own event log.

- ``events``: the bench's tool-call event log (``bench_canonical.make_document``);
- ``chat``: a text-heavy chat payload (model calls and context snapshots): long message strings
  with Unicode (accents, CJK, emoji), escapes (newlines, quotes, tabs, backslashes), few numbers;
- ``floats``: a float-heavy document (embeddings, metrics): lists of random doubles;
- ``deep``: deep nesting (chains of objects and arrays 200 levels deep);
- ``keys``: many small keys (flat objects with thousands of short keys and small values).

Every generator is deterministic (seeded) and returns about ``target_bytes`` canonical bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

_WORDS = (
    "the model said that a user asked about the weather in Paris and whether the invoice was "
    "paid before the refund policy changed last week so please check the database again"
).split()
_UNICODE = [
    "café",
    "naïve",
    "Zürich",
    "日本語のテキスト",
    "données",
    "€42",
    "🙂",
    "Ωmega",
    "Straße",
]
_ESCAPES = ["\n", "\n\n", "\t", '"quoted"', "C:\\path\\to", "</script>", "\u2028"]


def _paragraph(rng: random.Random, n_words: int) -> str:
    words = []
    for _ in range(n_words):
        r = rng.random()
        if r < 0.06:
            words.append(rng.choice(_UNICODE))
        elif r < 0.09:
            words.append(rng.choice(_ESCAPES))
        else:
            words.append(rng.choice(_WORDS))
    return " ".join(words)


def chat(target_bytes: int, seed: int = 35) -> dict[str, Any]:
    """A chat-completion request/response with long messages."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": _paragraph(rng, 120)},
    ]
    size = 0
    while size < target_bytes:
        role = "user" if len(messages) % 2 else "assistant"
        content = _paragraph(rng, rng.randint(40, 600))
        messages.append({"role": role, "content": content})
        size += len(content.encode()) + 40
    return {
        "model": "qwen2.5-0.5b-instruct",
        "temperature": 0.2,
        "max_tokens": 512,
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    }


def floats(target_bytes: int, seed: int = 754) -> dict[str, Any]:
    """Embeddings and metrics: random doubles of every magnitude a payload holds."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    size = 0
    while size < target_bytes:
        vector = [rng.gauss(0, 1) for _ in range(64)]
        rows.append(
            {
                "id": len(rows),
                "embedding": vector,
                "score": rng.random(),
                "latency_ms": rng.uniform(0.1, 5000),
                "loss": rng.expovariate(3),
            }
        )
        size += 64 * 20 + 90
    return {"model": "text-embedding", "data": rows}


def deep(target_bytes: int, seed: int = 200) -> list[Any]:
    """Chains of nested objects and arrays, 200 levels deep."""
    rng = random.Random(seed)
    out: list[Any] = []
    size = 0
    while size < target_bytes:
        node: Any = {"leaf": rng.randint(0, 10**6), "name": rng.choice(_WORDS)}
        for level in range(200):
            node = {"level": level, "child": node} if level % 2 else [level, node]
        out.append(node)
        size += 200 * 20 + 30
    return out


def keys(target_bytes: int, seed: int = 4096) -> list[dict[str, Any]]:
    """Flat objects with many short keys and small values (feature maps, headers)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    size = 0
    while size < target_bytes:
        obj: dict[str, Any] = {}
        for i in range(2_000):
            key = f"{rng.choice(_WORDS)[:4]}_{i:x}"
            obj[key] = rng.choice((rng.randint(0, 99), rng.choice(_WORDS), True, None))
        out.append(obj)
        size += 2_000 * 13
    return out


SHAPES: dict[str, Callable[[int], Any]] = {
    "chat": chat,
    "floats": floats,
    "deep": deep,
    "keys": keys,
}
