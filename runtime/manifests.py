"""Capture of what a run executes on: the environment and, in a git checkout, the source."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path

from models import EnvironmentManifest, SourceCodeManifest
from models.canonical import canonical_hash
from models.digest import sha256_digest

#: the digest of the container image this process runs (``REPLAYBOOK_IMAGE_DIGEST``), recorded
#: in every environment manifest; the composition root sets it once (``set_image_digest``)
_image_digest: str | None = None


def set_image_digest(digest: str | None) -> None:
    """Called by each composition root with ``Settings.image_digest``."""
    global _image_digest
    _image_digest = digest or None


@functools.cache
def installed_distributions_hash() -> str:
    """Hash of every installed distribution and its version: the effective dependency lock.
    Cached: a process does not change its installed distributions while it runs."""
    pins = sorted(
        {
            f"{d.metadata['Name'].lower()}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"]
        }
    )
    return canonical_hash(pins)


def os_image() -> str:
    try:
        fields = dict(
            line.split("=", 1)
            for line in Path("/etc/os-release").read_text().splitlines()
            if "=" in line
        )
        name = fields.get("PRETTY_NAME", "").strip('"')
    except OSError:
        name = ""
    return f"{name or platform.system()} {platform.machine()}".strip()


def capture_environment(tool_bundle_hash: str | None = None) -> EnvironmentManifest:
    return EnvironmentManifest(
        container_image_digest=_image_digest,
        os_image=os_image(),
        python_version=platform.python_version(),
        dependency_lock_hash=installed_distributions_hash(),
        tool_bundle_hash=tool_bundle_hash,
    )


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.decode(errors="replace").strip()


def capture_source_code(root: Path) -> SourceCodeManifest | None:
    """Base and head commit and the working-tree patch hash, when ``root`` is a git checkout
    with at least one commit; None otherwise. Computed once per process and root: the code a
    process runs was loaded when it started, so a later edit of the checkout is not what it
    executes (and running ``git`` on every recorded run cost ~11 ms a run)."""
    return _source_code(root.resolve())


@functools.cache
def _source_code(root: Path) -> SourceCodeManifest | None:
    head = _git(root, "rev-parse", "HEAD")
    if not head:
        return None
    base = _git(root, "merge-base", "HEAD", "origin/HEAD") or head
    try:
        patch = subprocess.run(
            ["git", "diff", "HEAD", "--binary"],
            cwd=root,
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        patch = None
    lock = next(
        (
            root / name
            for name in ("uv.lock", "poetry.lock", "requirements.lock", "pyproject.toml")
            if (root / name).is_file()
        ),
        None,
    )
    return SourceCodeManifest(
        base_commit=base,
        head_commit=head,
        working_tree_patch_hash=sha256_digest(patch) if patch is not None else None,
        dependency_lock_hash="sha256:" + hashlib.sha256(lock.read_bytes()).hexdigest()
        if lock
        else None,
        toolchain_version=f"python {platform.python_version()}",
    )
