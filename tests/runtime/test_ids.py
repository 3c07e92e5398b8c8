"""``runtime.ids``: version-4 UUIDs without a system call a draw, unique, and not repeated by a
forked child (its key is drawn again)."""

from __future__ import annotations

import os
import uuid

from runtime.ids import new_hex, new_uuid


def test_ids_are_version_4_uuids_and_unique() -> None:
    drawn = [new_uuid() for _ in range(100_000)]
    assert len(set(drawn)) == len(drawn)
    parsed = uuid.UUID(drawn[0])
    assert str(parsed) == drawn[0] and parsed.version == 4 and parsed.variant == uuid.RFC_4122
    assert len(new_hex(12)) == 12 and int(new_hex(), 16) >= 0


def test_a_forked_child_does_not_repeat_its_parent_s_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, then out at once
        try:
            os.write(write, new_uuid().encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        mine = new_uuid()  # the id the child would have drawn had its key stayed the parent's
        child = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert uuid.UUID(child).version == 4
    assert child != mine
