"""How a comparison words its differences: one-line explanations that name what changed
(capabilities, short changed values), never whole payloads; and answer similarity."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from typing import Any

#: longest argument or outcome value quoted in an explanation
MAX_VALUE = 40
#: most values quoted in one explanation
MAX_SHOWN = 2
#: a pseudonym of the redaction policy (``<name:…>``) is one word: an answer diff names it whole
_TOKEN = re.compile(r"<[a-z]+:[0-9a-f]{16}>|\w+|[^\w\s]")
_MISSING = object()


def one_line(text: str, limit: int = MAX_VALUE) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quoted(value: Any) -> str:
    """A JSON value as quoted in an explanation (strings bare, the rest as compact JSON)."""
    if isinstance(value, str):
        return one_line(value, 10**6)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def short(value: Any) -> str | None:
    """The rendered value when it is short enough to quote, else None."""
    text = quoted(value)
    return text if len(text) <= MAX_VALUE else None


def short_hash(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:12]}" if hexdigest else digest[:19]


def call_text(capability: str, arguments: Any) -> str:
    """``capability(k=v, …)`` showing only short values; long or extra ones are elided."""
    if arguments is None:
        return capability
    if not isinstance(arguments, dict):
        return f"{capability}({one_line(quoted(arguments))})"
    shown = [f"{k}={v}" for k in sorted(arguments) if (v := short(arguments[k])) is not None]
    elided = len(arguments) > len(shown[:MAX_SHOWN])
    return f"{capability}({', '.join([*shown[:MAX_SHOWN], *(['…'] if elided else [])])})"


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [
        k
        for k in sorted(before.keys() | after.keys())
        if before.get(k, _MISSING) != after.get(k, _MISSING)
    ]


def argument_change(
    capability: str, before: Any, after: Any, hash_before: str, hash_after: str
) -> str:
    """``email.send(to=bob@…) became email.send(to=carol@…)``, quoting changed values only."""
    if isinstance(before, dict) and isinstance(after, dict):
        changed = changed_keys(before, after)
        shown = [
            k
            for k in changed
            if short(before.get(k)) is not None and short(after.get(k)) is not None
        ][:MAX_SHOWN]
        rest = [k for k in changed if k not in shown]
        if shown:

            def side(args: dict[str, Any]) -> str:
                return ", ".join(f"{k}={quoted(args[k])}" for k in shown if k in args)

            text = f"{capability}({side(before)}) became {capability}({side(after)})"
            return text + (f"; {', '.join(rest)} also changed" if rest else "")
        if changed:
            more = f", +{len(changed) - 3} more" if len(changed) > 3 else ""
            return f"{capability} arguments changed: {', '.join(changed[:3])}{more}"
    if before is not None and after is not None and before != after:
        return (
            f"{capability}({one_line(quoted(before))}) became "
            f"{capability}({one_line(quoted(after))})"
        )
    return f"{capability} {short_hash(hash_before)} became {short_hash(hash_after)}"


def tool_names(names: Sequence[str]) -> str:
    if not names:
        return "no tools"
    shown = ", ".join(names[:4])
    return shown + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")


def tokens(text: str | None) -> list[str]:
    return _TOKEN.findall(text or "")


def answer_similarity(source: str | None, replay: str | None) -> float:
    """Word-level similarity of two answers in [0, 1] (``difflib`` ratio over word and
    punctuation tokens; whitespace is ignored). 1.0 when both are None (or empty) or equal;
    0.0 when exactly one of them is empty or None."""
    if source == replay:
        return 1.0
    a, b = tokens(source), tokens(replay)
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return min(1.0, max(0.0, difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()))


def answer_change(source: str | None, replay: str | None, similarity: float) -> str:
    head = f"final answer changed (similarity {similarity:.2f})"
    if not (source or "").strip():
        return f"{head}: the source gave none"
    if not (replay or "").strip():
        return f"{head}: the replay gave none"
    sa = list(_TOKEN.finditer(source or ""))
    sb = list(_TOKEN.finditer(replay or ""))
    matcher = difflib.SequenceMatcher(
        None, [m.group() for m in sa], [m.group() for m in sb], autojunk=False
    )

    def span(matches: list[re.Match[str]], lo: int, hi: int, text: str) -> str:
        return one_line(text[matches[lo].start() : matches[hi - 1].end()]) if hi > lo else ""

    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old, new = span(sa, i1, i2, source or ""), span(sb, j1, j2, replay or "")
        if old and new:
            return f"{head}: “{old}” became “{new}”"
        return f"{head}: removed “{old}”" if old else f"{head}: added “{new}”"
    return head
