"""``replaybook-sdk``'s options work after the command, as docs/sdk.md writes them
(``replaybook-sdk flush --url … --json``), and before it; given in both places, the one after
the command wins and the other options keep theirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replaybook.cli import main


def test_options_after_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REPLAYBOOK_URL", raising=False)
    spool = tmp_path / "spool"
    # nothing spooled: nothing to send, whatever the server
    assert main(["flush", "--url", "http://127.0.0.1:9", "--spool-dir", str(spool), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["spool_dir"] == str(spool)
    assert main(["status", "--spool-dir", str(spool), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"spooled": [], "refused": []}
    # no URL anywhere: bad usage
    assert main(["flush", "--spool-dir", str(spool)]) == 2


def test_options_before_the_command_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("REPLAYBOOK_URL", raising=False)
    before, after = tmp_path / "before", tmp_path / "after"
    argv = ["--url", "http://127.0.0.1:9", "--spool-dir", str(before), "--json", "flush"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["spool_dir"] == str(before)
    assert main([*argv, "--spool-dir", str(after)]) == 0
    assert json.loads(capsys.readouterr().out)["spool_dir"] == str(after)
