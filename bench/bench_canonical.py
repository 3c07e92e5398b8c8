"""Benchmark: Replaybook's canonical JSON against the pure-Python ``rfc8785`` package.

Run with ``.venv/bin/python -m bench --only canonical``. ``rows()`` prints one table row per
document shape and size (medians of interleaved rounds, with the spread of the rounds) and
returns them. The goal (issue 35): the canonical form at least 10x ``rfc8785.dumps`` on every
shape (the bench's event log, a text-heavy chat payload, floats, deep nesting, many small keys;
``bench.canonical_shapes``) at ~10 KB and ~1 MB, and at 1 MB the canonical hash (form + sha256)
at least 25% of the speed of sha256 alone: ``models.canonical.canonical_hash`` (what the
product calls; with the C extension the bytes are hashed where they were written) against
``sha256_digest`` of the same bytes (the same ``sha256:<hex>`` text). Times are CPU seconds of this process
(``time.process_time``): each candidate is single-threaded, and CPU time is what a loaded
machine's other processes disturb least.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any

import orjson
import rfc8785

from bench.canonical_shapes import SHAPES
from bench.common import (
    TABLE_HEADER,
    Row,
    Spread,
    emit,
    interleaved_samples,
    machine_load,
    ratio_spread,
)
from models.canonical import ACCELERATED, canonical_hash, canonicalize
from models.digest import sha256_digest

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


def _sha256(data: bytes) -> str:
    return sha256_digest(data)


def _hash(doc: Any) -> str:
    return canonical_hash(doc)


def _orjson_hash(doc: Any, option: int) -> str:
    """sha256 of ``orjson.dumps`` (not the canonical form: orjson writes floats, and with
    ``option=0`` keys, its own way) - the fastest JSON writer of Python objects, as context."""
    return _sha256(orjson.dumps(doc, option=option))


def _ceiling_row(shape: str, label: str, samples: dict[str, list[float]]) -> Row:
    """Context for the hash row: the goal's ratio reached by orjson (unsorted, sorted) + sha256
    on the same document, measured in the same rounds."""
    unsorted = ratio_spread(samples["sha256"], samples["orjson"])
    in_order = ratio_spread(samples["sha256"], samples["orjson sorted"])
    return emit(
        Row(
            figure=f"context: orjson.dumps + sha256, {shape} {label} (not canonical; the "
            "fastest JSON writer of Python objects)",
            value=f"keys as given {Spread.of(samples['orjson']).text()} CPU, "
            f"{unsorted.median:.2f}x sha256; OPT_SORT_KEYS "
            f"{Spread.of(samples['orjson sorted']).text()} CPU, {in_order.median:.2f}x sha256",
            baseline="sha256 of the canonical bytes " + Spread.of(samples["sha256"]).text(),
            ratio=unsorted.median,
            goal="— (context for the row above: its goal's ratio, reached by orjson)",
            met=None,
            load=machine_load(),
        )
    )


def shapes() -> dict[str, Callable[[int], Any]]:
    """Every document shape the goal names: the bench's event log and the real-work shapes."""
    return {"events": make_document, **SHAPES}


def rows(
    rounds: int = 5,
    sizes: tuple[tuple[str, int], ...] = (("10 KB", 10_000), ("1 MB", 1_000_000)),
    round_s: float = 0.15,
) -> list[Row]:
    """Per shape and size: the canonical form against ``rfc8785.dumps`` (the same document,
    interleaved rounds, CPU time); at 1 MB also the canonical hash (form + sha256) against
    sha256 alone of the same bytes, and as context orjson + sha256 (``_ceiling_row``). Medians
    of ``rounds`` rounds; the spread of the per-round ratios in brackets."""
    out: list[Row] = []
    print(f"canonical form: {'C extension' if ACCELERATED else 'pure Python (no C extension)'}")
    for shape, make in shapes().items():
        for label, size in sizes:
            doc = make(size)
            ours = canonicalize(doc)
            if ours != rfc8785.dumps(doc) or _hash(doc) != _sha256(ours):
                raise AssertionError(f"canonical {shape} {label}: output differs from rfc8785")
            big = size > 100_000
            candidates: dict[str, Callable[[], object]] = {
                "ours": functools.partial(canonicalize, doc),
                "rfc8785": functools.partial(rfc8785.dumps, doc),
            }
            if big:
                candidates["hash"] = functools.partial(_hash, doc)
                candidates["sha256"] = functools.partial(_sha256, ours)
                candidates["orjson"] = functools.partial(_orjson_hash, doc, 0)
                candidates["orjson sorted"] = functools.partial(
                    _orjson_hash, doc, orjson.OPT_SORT_KEYS
                )
            samples = interleaved_samples(
                candidates,
                rounds=rounds,
                round_s=round_s if big else round_s / 3,
                clock=time.process_time,  # CPU time: robust to the machine's other load
            )
            spread = ratio_spread(samples["rfc8785"], samples["ours"])
            out.append(
                emit(
                    Row(
                        figure=f"canonical form, {shape} {label} ({len(ours):,} bytes)",
                        value=Spread.of(samples["ours"]).text() + " CPU",
                        baseline="rfc8785.dumps " + Spread.of(samples["rfc8785"]).text(),
                        ratio=spread.median,
                        goal=f">= {TARGET_RATIO:g}x rfc8785 "
                        f"(rounds {spread.low:.1f}–{spread.high:.1f}x)",
                        met=spread.median >= TARGET_RATIO,
                        load=machine_load(),
                    )
                )
            )
            if big:
                share = ratio_spread(samples["sha256"], samples["hash"])
                out.append(
                    emit(
                        Row(
                            figure=f"canonical hash, {shape} {label}, against sha256 alone",
                            value="form + sha256 " + Spread.of(samples["hash"]).text() + " CPU",
                            baseline="sha256 of the same bytes "
                            + Spread.of(samples["sha256"]).text(),
                            ratio=share.median,
                            goal=f">= 0.25x sha256 (rounds {share.low:.2f}–{share.high:.2f}x)",
                            met=share.median >= 0.25,
                            load=machine_load(),
                        )
                    )
                )
                out.append(_ceiling_row(shape, label, samples))
    return out


def main() -> list[dict[str, object]]:
    print(TABLE_HEADER)
    return [row.as_dict() for row in rows()]


if __name__ == "__main__":
    main()
