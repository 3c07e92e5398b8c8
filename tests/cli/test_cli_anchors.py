"""``anchors public-key`` prints the key of the installation's anchors, and ``anchors verify
--public-key FILE COPY`` checks a copy with it (the keys and the copy's store reached through
``app.anchors``, the settings read in the face)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from models.anchor import Anchor
from models.digest import sha256_digest
from stores.anchor_signing import load_anchor_keys
from stores.anchors import open_anchor_log
from stores.artifacts import LocalArtifactStore
from stores.config import AnchorSettings
from tests.tamper.conftest import T0

REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it: in a process of its own (in process, its signal handling
    (SIGPIPE) would become the test worker's)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYBOOK_")}
    return subprocess.run(
        [REPLAYBOOK, *args], capture_output=True, text=True, env=base | env, timeout=120
    )


def test_the_printed_public_key_checks_the_installations_anchors(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the development anchor key generated under the home, as the worker would on first use
    log = open_anchor_log(
        LocalArtifactStore(tmp_path / "anchors"), load_anchor_keys(AnchorSettings(), home)
    )
    asyncio.run(log.append(Anchor(run_id="run-1", sequence=1, head=sha256_digest(b"1"), at=T0)))
    env = {"REPLAYBOOK_HOME": str(home), "REPLAYBOOK_DATABASE_URL": "nowhere"}
    pem = tmp_path / "anchor.pem"
    written = _cli(["anchors", "public-key", "-o", str(pem)], env)
    assert written.returncode == 0, written.stderr
    printed = _cli(["anchors", "public-key"], env)
    assert printed.stdout.encode() == pem.read_bytes()
    assert printed.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    args = ["anchors", "verify", "--public-key", str(pem), str(tmp_path / "anchors")]
    checked = _cli(args, env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.startswith("intact: 1 anchors in ")
    other = _cli(["anchors", "public-key"], env | {"REPLAYBOOK_HOME": str(tmp_path / "other")})
    assert other.returncode == 0 and other.stdout != printed.stdout  # another home, another key
