"""Architecture rules: models/ is pure, our top-level names are ours alone, ruff is clean."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = {"models", "runtime", "stores", "activities", "workflows", "worker", "examples"}
IO_LIBRARIES = {
    "sqlalchemy",
    "asyncpg",
    "aiosqlite",
    "alembic",
    "boto3",
    "botocore",
    "temporalio",
    "structlog",
    "asyncio",
    "socket",
    "requests",
    "httpx",
    "urllib",
    "subprocess",
    "sqlite3",
}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_models_source_imports_no_io_library() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & IO_LIBRARIES)
        for path in (ROOT / "models").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    allowed = {"models", "pydantic", "pydantic_core", "orjson", "__future__"}
    foreign = {
        (path.name, root)
        for path in (ROOT / "models").rglob("*.py")
        for root in _imported_roots(path)
        if root not in allowed and root not in sys.stdlib_module_names
    }
    assert foreign == set()


def test_importing_models_loads_no_io_library() -> None:
    code = (
        "import json, sys, pkgutil, importlib, models\n"
        "for m in pkgutil.walk_packages(models.__path__, 'models.'): importlib.import_module(m.name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded = {name.split(".")[0] for name in json.loads(out.stdout)}
    assert loaded & (IO_LIBRARIES - {"socket", "urllib", "subprocess"}) == set()


def test_no_other_distribution_provides_our_top_level_names() -> None:
    clashes = {}
    for dist in importlib.metadata.distributions():
        if dist.metadata["Name"].lower() == "replaybook":
            continue
        tops = set((dist.read_text("top_level.txt") or "").split())
        for file in dist.files or ():
            parts = Path(str(file)).parts
            if (
                parts
                and not parts[0].endswith((".dist-info", ".egg-info", ".data"))
                and parts[0] != ".."
            ):
                tops.add(parts[0].removesuffix(".py"))
        if tops & OUR_PACKAGES:
            clashes[dist.metadata["Name"]] = sorted(tops & OUR_PACKAGES)
    assert clashes == {}
    import models
    import worker

    assert Path(models.__file__).resolve().parent == ROOT / "models"
    assert Path(worker.__file__).resolve().parent == ROOT / "worker"


def test_ruff_is_clean() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
