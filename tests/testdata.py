"""Third-party test data, kept in the repository compressed (``tests/data/testdata.tar.xz``)
so that a clone tests itself without ``../shared``; unpacked once per archive version into
the system's temporary directory. ``tests/data/README.md`` says how to refresh it."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

ARCHIVE = Path(__file__).resolve().parent / "data" / "testdata.tar.xz"


def unpacked_testdata() -> Path:
    """The unpacked ``testdata`` folder (``rfc8785/``, ``tau-bench/``, ``otel-any-agent/``)."""
    digest = hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"replaybook-testdata-{digest}"
    if not (target / "testdata").is_dir():
        # unpack beside the target and rename: concurrent sessions never see half a folder
        staging = Path(tempfile.mkdtemp(prefix="replaybook-testdata-", dir=target.parent))
        with tarfile.open(ARCHIVE, "r:xz") as archive:
            archive.extractall(staging, filter="data")
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "testdata").is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
    return target / "testdata"
