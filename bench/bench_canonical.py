"""Benchmark: Replaybook's canonical JSON against the pure-Python ``rfc8785`` package.

Run with ``.venv/bin/python -m bench.bench_canonical``. ``rows()`` prints one table row per
document size (medians of interleaved rounds) and returns them (``bench/__main__`` collects
them). The target is at least 10x ``rfc8785`` (+ sha256) on a ~10 KB and a ~1 MB document of
realistic agent payloads, and at 1 MB at least 25% of the speed of sha256 alone. Times are CPU
seconds of this process (``time.process_time``): each candidate is single-threaded, and CPU time
is what a loaded machine's other processes disturb least.
"""

from __future__ import annotations

import functools
import hashlib
import random
import time
from typing import Any

import rfc8785

from bench.common import TABLE_HEADER, Row, emit, interleaved, machine_load
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


def _hash_ours(doc: Any) -> bytes:
    return hashlib.sha256(canonicalize(doc)).digest()


def _hash_rfc8785(doc: Any) -> bytes:
    return hashlib.sha256(rfc8785.dumps(doc)).digest()


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def rows(rounds: int = 7) -> list[Row]:
    """Canonical hash of ~1 KB, ~10 KB and ~1 MB documents against ``rfc8785`` + sha256, and
    (at 1 MB) against sha256 of the same bytes alone."""
    out: list[Row] = []
    for label, size in (("1 KB", 1_000), ("10 KB", 10_000), ("1 MB", 1_000_000)):
        doc = make_document(size)
        ours = canonicalize(doc)
        if ours != rfc8785.dumps(doc):
            raise AssertionError(f"canonical {label}: output differs from rfc8785.dumps")
        times = interleaved(
            {
                "ours": functools.partial(_hash_ours, doc),
                "rfc8785": functools.partial(_hash_rfc8785, doc),
                "sha256": functools.partial(_sha256, ours),
            },
            rounds=rounds,
            round_s=0.2 if size > 100_000 else 0.05,
            clock=time.process_time,  # CPU time: robust to the machine's other load
        )
        ratio = times["rfc8785"] / times["ours"]
        out.append(
            emit(
                Row(
                    figure=f"canonical hash {label} ({len(ours):,} bytes)",
                    value=f"{times['ours'] * 1e3:.3f} ms CPU",
                    baseline=f"rfc8785 + sha256 {times['rfc8785'] * 1e3:.3f} ms CPU",
                    ratio=ratio,
                    goal=f">= {TARGET_RATIO:g}x rfc8785",
                    met=ratio >= TARGET_RATIO,
                    load=machine_load(),
                )
            )
        )
        if size > 100_000:
            share = times["sha256"] / times["ours"]
            out.append(
                emit(
                    Row(
                        figure=f"canonical hash {label} against sha256 alone",
                        value=f"{times['ours'] * 1e3:.3f} ms CPU",
                        baseline=f"sha256 of the same bytes {times['sha256'] * 1e3:.3f} ms CPU",
                        ratio=share,
                        goal=">= 0.25x sha256 (25%)",
                        met=share >= 0.25,
                        load=machine_load(),
                    )
                )
            )
    return out


def main() -> list[dict[str, object]]:
    print(TABLE_HEADER)
    return [row.as_dict() for row in rows()]


if __name__ == "__main__":
    main()
