"""What a run's header pins about the agent's process: the code version (git sha), the
packages the agent runs on, the Python version. Computed once per process."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

#: distributions whose versions a run pins when they are installed (the frameworks an agent
#: is built on and the clients it calls)
PACKAGES = (
    "replaybook-sdk",
    "openai",
    "httpx",
    "openai-agents",
    "langgraph",
    "langchain-core",
    "langchain-openai",
    "pydantic-ai-slim",
    "pydantic-ai",
    "pydantic",
    "llama-index-core",
    "crewai",
    "anthropic",
)


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@lru_cache(maxsize=1)
def git_state() -> dict[str, str]:
    """``head_commit`` (and ``working_tree_patch_hash`` when the tree has changes) of the
    repository holding the agent's main script; ``REPLAYBOOK_CODE_VERSION`` overrides it
    (a container without .git)."""
    given = os.environ.get("REPLAYBOOK_CODE_VERSION")
    if given:
        return {"head_commit": given}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    where = Path(main).resolve().parent if main else Path.cwd()
    try:
        sha = _git(where, "rev-parse", "HEAD").decode().strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    state = {"head_commit": sha}
    try:
        diff = _git(where, "diff", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return state
    if diff:
        state["working_tree_patch_hash"] = "sha256:" + hashlib.sha256(diff).hexdigest()
    return state


def _git(where: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(where), *args],
        capture_output=True,
        check=True,
        timeout=5,
    ).stdout


def environment() -> dict[str, Any]:
    packages = package_versions()
    lock = json.dumps(packages, sort_keys=True, separators=(",", ":")).encode()
    return {
        "python_version": platform.python_version(),
        "dependency_lock_hash": "sha256:" + hashlib.sha256(lock).hexdigest(),
    }
