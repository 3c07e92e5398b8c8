"""The comparison's alignment helpers (``models.comparison_align``) against the quadratic
originals they replace (kept here as references): the same answers on random inputs."""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Sequence

from models.comparison_align import EXACT_LIMIT, capability_opcodes, match_by_key, positions


def _positions_reference(steps: Sequence[str], step_ids: list[str]) -> list[int]:
    out: list[int] = []
    cursor = 0
    for step in step_ids:
        found = next((j for j in range(cursor, len(steps)) if steps[j] == step), None)
        if found is None:
            found = next((j for j in range(cursor) if steps[j] == step), cursor)
        else:
            cursor = found
        out.append(found)
    return out


def _match_reference(
    a: list[tuple[str, str]],
    b: list[tuple[str, str]],
    same: Callable[[tuple[str, str], tuple[str, str]], bool],
    free_a: set[int],
    free_b: set[int],
) -> list[tuple[int, int]]:
    pairs = []
    for i in sorted(free_a):
        j = next((j for j in sorted(free_b) if same(a[i], b[j])), None)
        if j is not None:
            pairs.append((i, j))
            free_a.discard(i)
            free_b.discard(j)
    return pairs


def test_positions_are_the_scanning_original_s() -> None:
    rng = random.Random(31)
    for _ in range(500):
        steps = rng.choices("abcdef", k=rng.randint(0, 20))
        facts = rng.choices("abcdefg", k=rng.randint(0, 20))
        assert positions(steps, facts) == _positions_reference(steps, facts)


def test_matching_by_key_is_the_pairwise_original_s() -> None:
    rng = random.Random(32)
    for _ in range(500):
        a = [(rng.choice("pq"), rng.choice("xyz")) for _ in range(rng.randint(0, 12))]
        b = [(rng.choice("pq"), rng.choice("xyz")) for _ in range(rng.randint(0, 12))]
        free = (set(rng.sample(range(len(a)), k=len(a) // 2)), set(range(len(b))))
        mine = (set(free[0]), set(free[1]))
        pairs = match_by_key(a, b, lambda x: x, *mine)
        assert pairs == _match_reference(a, b, lambda x, y: x == y, *free)
        assert mine == free


def test_capability_alignment_is_difflib_s_up_to_the_limit() -> None:
    rng = random.Random(33)
    for _ in range(300):
        a = rng.choices("abc", k=rng.randint(0, 30))
        b = rng.choices("abc", k=rng.randint(0, 30))
        expected = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
        assert capability_opcodes(a, b) == expected


def _covers(opcodes: list[tuple[str, int, int, int, int]], a: list[str], b: list[str]) -> None:
    """Opcodes tile both sequences in order, and ``equal`` spans hold equal items."""
    i = j = 0
    for tag, i1, i2, j1, j2 in opcodes:
        assert (i1, j1) == (i, j)
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2]
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))


def test_long_runs_align_their_common_prefix_and_suffix_in_linear_time() -> None:
    n = 2 * int(EXACT_LIMIT**0.5)
    a = ["search", "read"] * n
    b = [*a[:n], "write", *a[n + 2 :]]  # one call changed in the middle
    opcodes = capability_opcodes(a, b)
    assert opcodes == [
        ("equal", 0, n, 0, n),
        ("replace", n, n + 2, n, n + 1),
        ("equal", n + 2, 2 * n, n + 1, 2 * n - 1),
    ]
    shorter = a[: n // 2]  # a replay that stopped early
    assert capability_opcodes(a, shorter) == [
        ("equal", 0, n // 2, 0, n // 2),
        ("delete", n // 2, 2 * n, n // 2, n // 2),
    ]
    rng = random.Random(34)
    for _ in range(5):  # a middle too large for the matcher: aligned position by position
        x = rng.choices("ab", k=3 * n)
        y = rng.choices("ab", k=2 * n)
        _covers(capability_opcodes(x, y), x, y)
