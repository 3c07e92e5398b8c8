"""Benchmark: Replaybook's canonical JSON against the pure-Python ``rfc8785`` package.

Run with ``.venv/bin/python -m bench.bench_canonical``. ``main()`` prints one line per document
size and returns the figures as a dict (``bench/__main__`` collects them). The target is at least
10x ``rfc8785.dumps`` on a ~10 KB and a ~1 MB document of realistic agent payloads.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any

import rfc8785

from models.canonical import canonicalize

TARGET_RATIO = 10.0

_WORDS = (
    "search result agent tool call weather forecast invoice customer order refund policy "
    "database query status pending approved shipment tracking summary analysis report "
    "the a of to and in for on with is was by this that from"
).split()
_UNICODE_WORDS = ["café", "naïve", "Zürich", "日本語", "données", "€42", "ünïcödé", "🙂", "Ωmega"]


def _text(rng: random.Random, n_words: int) -> str:
    words = [rng.choice(_WORDS) for _ in range(n_words)]
    if rng.random() < 0.15:  # some non-ASCII, as real user and web text has
        words[rng.randrange(n_words)] = rng.choice(_UNICODE_WORDS)
    return " ".join(words)


def _tool_event(rng: random.Random, i: int) -> dict[str, Any]:
    """One recorded step of an agent run: a tool call, its result and some metadata."""
    return {
        "sequence": i,
        "type": rng.choice(["tool_call", "llm_call", "tool_result"]),
        "run_id": f"run-{rng.getrandbits(64):016x}",
        "timestamp": f"2024-05-{rng.randint(1, 28):02d}T12:{rng.randint(0, 59):02d}:00.123Z",
        "tool": {
            "name": rng.choice(["web_search", "get_weather", "sql_query", "send_email"]),
            "arguments": {
                "query": _text(rng, rng.randint(3, 10)),
                "limit": rng.randint(1, 50),
                "filters": {"lang": rng.choice(["en", "fr", "de"]), "safe": rng.random() < 0.5},
            },
        },
        "result": {
            "items": [
                {
                    "title": _text(rng, rng.randint(2, 8)),
                    "url": f"https://example.com/{rng.choice(_WORDS)}/{rng.randint(1, 10**6)}",
                    "score": round(rng.random(), rng.randint(2, 6)),
                    "rank": j,
                }
                for j in range(rng.randint(1, 4))
            ],
            "latency_ms": round(rng.uniform(5, 2000), 2),
            "cached": rng.random() < 0.3,
            "error": None,
        },
        "usage": {"prompt_tokens": rng.randint(10, 4000), "completion_tokens": rng.randint(1, 800)},
        "model": {"name": "gpt-4o", "temperature": rng.choice([0.0, 0.2, 0.7, 1.0])},
        "tags": [rng.choice(_WORDS) for _ in range(rng.randint(0, 4))],
    }


def make_document(target_bytes: int, seed: int = 8785) -> dict[str, Any]:
    """A deterministic document of about ``target_bytes`` canonical bytes."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    doc = {"schema": "replaybook.bench/1", "agent": {"name": "support-bot"}, "events": events}
    size = 0
    while size < target_bytes:
        event = _tool_event(rng, len(events))
        events.append(event)
        size += len(canonicalize(event)) + 1
    return doc


def _best_time(fn: Callable[[], object], budget_s: float = 1.0) -> float:
    """Best single-call time in seconds, from repeated batches filling about ``budget_s``."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    number = max(1, int(0.05 / once))  # batches of about 50 ms
    best = float("inf")
    deadline = time.perf_counter() + budget_s
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
        if time.perf_counter() >= deadline:
            return best


def main(budget_s: float = 1.0) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for label, size in (("10KB", 10_000), ("1MB", 1_000_000)):
        doc = make_document(size)
        ours = canonicalize(doc)
        if ours != rfc8785.dumps(doc):
            raise AssertionError(f"canonical {label}: output differs from rfc8785.dumps")
        t_ours = _best_time(functools.partial(canonicalize, doc), budget_s)
        t_ref = _best_time(functools.partial(rfc8785.dumps, doc), budget_s)
        ratio = t_ref / t_ours
        print(
            f"canonical {label}: replaybook {t_ours * 1e3:.3f} ms, rfc8785 {t_ref * 1e3:.2f} ms, "
            f"ratio {ratio:.1f}x (target >={TARGET_RATIO:g}x) [{len(ours)} bytes]"
        )
        results[label] = {
            "bytes": len(ours),
            "replaybook_ms": t_ours * 1e3,
            "rfc8785_ms": t_ref * 1e3,
            "ratio": ratio,
            "target_ratio": TARGET_RATIO,
        }
    return results


if __name__ == "__main__":
    main()
