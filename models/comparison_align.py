"""Alignment helpers of the comparison (``models.comparison``), each O(n log n) or better in the
run's length (issue 35: the comparison was quadratic, and a long replay spent its end in
COMPARING).

- ``positions``: the step occurrence each fact belongs to, by an index of every step's
  occurrences and a binary search (was a scan per fact);
- ``match_by_key``: greedy pairing of still-free items with equal keys, smallest index first,
  by a queue per key (was a scan of every free item per item);
- ``capability_opcodes``: ``difflib.SequenceMatcher(...).get_opcodes()`` on two capability
  sequences, exactly, while it is cheap; a long pair is first cut to what differs (common
  prefix and suffix are aligned as equal), and a middle still too large for the quadratic
  matcher is aligned position by position.
"""

from __future__ import annotations

import difflib
import functools
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar, overload

__all__ = ["EXACT_LIMIT", "LazyPositions", "capability_opcodes", "match_by_key", "positions"]

T = TypeVar("T")
Opcode = tuple[str, int, int, int, int]

#: ``len(a) * len(b)`` up to which ``capability_opcodes`` is SequenceMatcher's own answer on
#: the whole sequences (today's alignment, unchanged for every run up to ~700 x 700 tool calls)
EXACT_LIMIT = 500_000


@functools.lru_cache(maxsize=4)
def _occurrences(steps: tuple[str, ...]) -> dict[str, list[int]]:
    """Each step's indices in ``steps`` (a comparison asks for a run's steps a dozen times)."""
    occurrences: dict[str, list[int]] = defaultdict(list)
    for index, step in enumerate(steps):
        occurrences[step].append(index)
    return occurrences


class LazyPositions(Sequence[int]):
    """``positions(steps, step_ids)``, computed on first use: a comparison without differences
    never reads them (they only place the differences found)."""

    def __init__(self, steps: Sequence[str], step_ids: Iterable[str]) -> None:
        self._steps, self._ids = steps, step_ids
        self._list: list[int] | None = None

    def _all(self) -> list[int]:
        if self._list is None:
            self._list = positions(self._steps, self._ids)
        return self._list

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())


def positions(steps: Sequence[str], step_ids: Iterable[str]) -> list[int]:
    """For facts in execution order, the index of the step occurrence each belongs to.

    A fact maps to the first occurrence of its step at or after the previous fact's one (so a
    step that runs twice is told apart); a step met only before that place maps to its first
    occurrence, and a step that was never started (``run``) keeps the current place.
    """
    occurrences = _occurrences(tuple(steps))
    out: list[int] = []
    cursor = 0
    for step in step_ids:
        places = occurrences.get(step)
        if not places:
            out.append(cursor)
            continue
        k = bisect_left(places, cursor)
        if k < len(places):
            cursor = places[k]
            out.append(cursor)
        else:  # only earlier occurrences: the first one, the place stays
            out.append(places[0])
    return out


def match_by_key(
    a: Sequence[T],
    b: Sequence[T],
    key: Callable[[T], Hashable],
    free_a: set[int],
    free_b: set[int],
) -> list[tuple[int, int]]:
    """Pair still-free items of ``a`` and ``b`` with equal keys, greedily: each free item of
    ``a`` in index order takes the free item of ``b`` with the smallest index and its key."""
    # per key, its smallest free index of b, and (rarely) its other ones from the largest down:
    # ints in a dict, not a container per key (10,000 lists or deques cost 40x the time of
    # 1,000: each is an object for the garbage collector)
    first: dict[Hashable, int] = {}
    more: dict[Hashable, list[int]] = {}
    # every item free (the first pass of a comparison): their indices in order, no sort
    for j in range(len(b) - 1, -1, -1) if len(free_b) == len(b) else sorted(free_b, reverse=True):
        k = key(b[j])
        later = first.get(k)
        if later is not None:
            more.setdefault(k, []).append(later)
        first[k] = j
    pairs = []
    for i in range(len(a)) if len(free_a) == len(a) else sorted(free_a):
        k = key(a[i])
        found = first.get(k)
        if found is not None:
            rest = more.get(k)
            if rest:
                first[k] = rest.pop()
            else:
                del first[k]
            pairs.append((i, found))
            free_a.discard(i)
            free_b.discard(found)
    return pairs


def _positional(a: Sequence[str], b: Sequence[str], i0: int, j0: int) -> list[Opcode]:
    """Opcodes aligning ``a`` and ``b`` position by position (offsets ``i0``, ``j0``): runs of
    equal items are ``equal``, others ``replace``, the longer side's tail ``delete``/``insert``."""
    out: list[Opcode] = []
    n = min(len(a), len(b))
    k = 0
    while k < n:
        same = a[k] == b[k]
        end = k
        while end < n and (a[end] == b[end]) == same:
            end += 1
        out.append(("equal" if same else "replace", i0 + k, i0 + end, j0 + k, j0 + end))
        k = end
    if len(a) > n:
        out.append(("delete", i0 + n, i0 + len(a), j0 + n, j0 + n))
    elif len(b) > n:
        out.append(("insert", i0 + n, i0 + n, j0 + n, j0 + len(b)))
    return out


def capability_opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """``SequenceMatcher(None, a, b, autojunk=False).get_opcodes()``, in O(n) for long runs.

    Exact (the matcher on the whole) when the sequences are equal or ``len(a) * len(b)`` is at
    most ``EXACT_LIMIT``. Otherwise the common prefix and suffix are ``equal`` and the matcher
    aligns the middle if that is within the limit; a larger middle is aligned position by
    position (``_positional``). The matcher's time grows with the product of the lengths when
    items repeat (a run calls the same few tools again and again): 10,000 steps took minutes.
    """
    if len(a) == len(b) and list(a) == list(b):
        return [("equal", 0, len(a), 0, len(b))] if a else []
    if len(a) * len(b) <= EXACT_LIMIT:
        return list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes())
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    out: list[Opcode] = [("equal", 0, head, 0, head)] if head else []
    if len(mid_a) * len(mid_b) <= EXACT_LIMIT:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            out.append((tag, head + i1, head + i2, head + j1, head + j2))
    else:
        out += _positional(mid_a, mid_b, head, head)
    if tail:
        out.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return _merged(out)


def _merged(opcodes: list[Opcode]) -> list[Opcode]:
    """Adjacent ``equal`` opcodes joined (the prefix, the middle's own, the suffix)."""
    out: list[Opcode] = []
    for op in opcodes:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if out and op[0] == "equal" and out[-1][0] == "equal":
            tag, i1, _, j1, _ = out[-1]
            out[-1] = (tag, i1, op[2], j1, op[4])
        else:
            out.append(op)
    return out
