"""``anchors public-key`` prints the key of the installation's anchors, and ``anchors verify
--public-key FILE COPY`` checks a copy with it (the keys and the copy's store reached through
``app.anchors``, the settings read in the face)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from models.anchor import Anchor
from models.digest import sha256_digest
from stores.anchor_signing import load_anchor_keys
from stores.anchors import open_anchor_log
from stores.artifacts import LocalArtifactStore
from stores.config import AnchorSettings
from tests.tamper.conftest import T0


def test_the_printed_public_key_checks_the_installations_anchors(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the development anchor key generated under the home, as the worker would on first use
    log = open_anchor_log(
        LocalArtifactStore(tmp_path / "anchors"), load_anchor_keys(AnchorSettings(), home)
    )
    asyncio.run(log.append(Anchor(run_id="run-1", sequence=1, head=sha256_digest(b"1"), at=T0)))
    env = {"REPLAYBOOK_HOME": str(home), "REPLAYBOOK_DATABASE_URL": "nowhere"}
    pem = tmp_path / "anchor.pem"
    written = CliRunner().invoke(app, ["anchors", "public-key", "-o", str(pem)], env=env)
    assert written.exit_code == 0, written.output
    printed = CliRunner().invoke(app, ["anchors", "public-key"], env=env)
    assert printed.stdout.encode() == pem.read_bytes()
    assert printed.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    args = ["anchors", "verify", "--public-key", str(pem), str(tmp_path / "anchors")]
    checked = CliRunner().invoke(app, args, env=env)
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.startswith("intact: 1 anchors in ")
    other = CliRunner().invoke(
        app, ["anchors", "public-key"], env=env | {"REPLAYBOOK_HOME": str(tmp_path / "other")}
    )
    assert other.exit_code == 0 and other.stdout != printed.stdout  # another home, another key
