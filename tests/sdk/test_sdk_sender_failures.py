"""The background sender never spins: a failure it did not expect backs off as an unavailable
server does, and a spool whose file was removed under it is given up with an error, not
retried forever (the bench's leftover sender once logged 8 million lines on a core)."""

from __future__ import annotations

import time
from pathlib import Path

from replaybook._config import Config
from replaybook._sender import Sender
from replaybook._spool import RunSpool

#: nothing listens there: connecting is refused at once
DEAD = "http://127.0.0.1:1"


def _sender(tmp_path: Path) -> Sender:
    return Sender(Config(url=DEAD, token="t", spool_dir=tmp_path, http_timeout=2.0))


def test_an_unexpected_failure_backs_off_and_the_pause_grows(tmp_path: Path) -> None:
    sender = _sender(tmp_path)
    failures = []

    def failing_round() -> bool:
        failures.append(1)
        raise RuntimeError("something the sender did not foresee")

    sender._round = failing_round  # type: ignore[method-assign]
    sender._attempt()
    first = sender._backoff
    assert first >= 0.5 and sender._retry_at > time.monotonic()
    sender._attempt()
    assert sender._backoff == min(sender.config.max_backoff, 2 * first)
    assert len(failures) == 2


def test_a_spool_file_removed_under_the_sender_is_given_up_with_an_error(
    tmp_path: Path,
) -> None:
    sender = _sender(tmp_path)
    spool = RunSpool.create(tmp_path, "run-removed")
    spool.append("h", {"run_id": "run-removed"})
    sender._spools[spool.run_id] = spool
    assert sender._round() is False  # the server is down: kept, retried later
    assert sender._retry_at > time.monotonic() and spool.run_id in sender._spools
    spool.path.unlink()
    sender._retry_at = 0.0
    sender._round()
    assert spool.run_id not in sender._spools
    assert any("spool file is gone" in e and "run-removed" in e for e in sender.errors)
    spool.close(delete=False)
