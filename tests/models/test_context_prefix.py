"""A context snapshot may continue an earlier snapshot of its run (its first messages are
that one's): a snapshot without a prefix serializes and hashes exactly as before the prefix
existed, and a prefix resolves to the whole message list or is refused as broken evidence."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from models import ContextSnapshot
from models.canonical import canonical_hash
from models.errors import IntegrityError
from models.evidence import context_message_refs, resolvable_snapshots

H = "sha256:" + "0" * 64


def _snapshot(
    sid: str, refs: tuple[str, ...], prefix: str | None = None, count: int = 0, run: str = "r"
) -> ContextSnapshot:
    return ContextSnapshot(
        snapshot_id=sid,
        run_id=run,
        step_id="model",
        message_refs=refs,
        tool_catalog_hash=H,
        state_hash=H,
        content_hash=H,
        prefix_snapshot_id=prefix,
        prefix_messages=count,
    )


def test_a_snapshot_without_prefix_is_recorded_as_before() -> None:
    snapshot = _snapshot("c1", ("a", "b"))
    # the fields of the form before the prefix, and only those
    before = {
        "schema_version": 1,
        "snapshot_id": "c1",
        "run_id": "r",
        "step_id": "model",
        "message_refs": ["a", "b"],
        "evidence_refs": [],
        "memory_refs": [],
        "tool_catalog_hash": H,
        "state_hash": H,
        "content_hash": H,
    }
    assert snapshot.model_dump(mode="json") == before
    assert snapshot.record_hash() == canonical_hash(before)
    assert ContextSnapshot.model_validate(before) == snapshot
    continued = _snapshot("c2", ("c",), "c1", 2)
    dumped = continued.model_dump(mode="json")
    assert dumped["prefix_snapshot_id"] == "c1" and dumped["prefix_messages"] == 2
    assert ContextSnapshot.model_validate(dumped) == continued


def test_a_prefix_needs_both_its_snapshot_and_its_count() -> None:
    with pytest.raises(ValidationError, match="go together"):
        _snapshot("c2", ("c",), "c1", 0)
    with pytest.raises(ValidationError, match="go together"):
        _snapshot("c2", ("c",), None, 3)


def test_prefixes_resolve_through_earlier_snapshots() -> None:
    chain = [
        _snapshot("c1", ("s", "u1")),
        _snapshot("c2", ("a1", "u2"), "c1", 2),
        _snapshot("c3", ("a2", "u3"), "c2", 4),
        # the conversation was cut back: only 3 messages of c3, then another one
        _snapshot("c4", ("x",), "c3", 3),
        _snapshot("c5", ("y",), "c4", 1),
    ]
    by_id = {s.snapshot_id: s for s in chain}
    assert [context_message_refs(s, by_id) for s in chain] == [
        ("s", "u1"),
        ("s", "u1", "a1", "u2"),
        ("s", "u1", "a1", "u2", "a2", "u3"),
        ("s", "u1", "a1", "x"),
        ("s", "y"),
    ]
    assert resolvable_snapshots(chain) == set(by_id)


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        (_snapshot("c3", ("z",), "gone", 1), "not an earlier snapshot"),
        (_snapshot("c3", ("z",), "c2", 5), "which has 4"),
        (_snapshot("c3", ("z",), "other", 1), "not an earlier snapshot"),
        (_snapshot("c3", ("z",), "c3", 1), "not an earlier snapshot"),
    ],
)
def test_a_broken_prefix_is_refused(broken: ContextSnapshot, why: str) -> None:
    chain = [_snapshot("c1", ("s", "u1")), _snapshot("c2", ("a1", "u2"), "c1", 2)]
    other = _snapshot("other", ("o",), run="another-run")
    by_id = {s.snapshot_id: s for s in [*chain, other, broken]}
    with pytest.raises(IntegrityError, match=why):
        context_message_refs(broken, by_id)
    # a model call whose snapshot does not resolve has no complete context
    assert resolvable_snapshots([*chain, broken]) == {"c1", "c2"}


def test_a_prefix_must_name_an_earlier_snapshot_to_count() -> None:
    later_first = [_snapshot("c2", ("a1",), "c1", 1), _snapshot("c1", ("s",))]
    assert resolvable_snapshots(later_first) == {"c1"}
