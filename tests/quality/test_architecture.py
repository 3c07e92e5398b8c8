"""The arrows of DESIGN.md's architecture, enforced on the source (ast, no imports run):

faces (``cli``, ``api``, ``devstack``) → ``app`` → ``workflows`` → ``activities`` →
``forensics``, ``ingest``, ``integrations`` → ``runtime`` → ``models``, with ``stores``
implementing the ports of ``runtime``; ``worker`` wires the Temporal worker. Also: no cycle
between packages, SQL only in ``stores``, no environment reads below the composition roots,
and the two faces share no code.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from tests.quality.layout import PACKAGES, ROOT

FACES_AND_ROOTS = {"worker", "cli", "api", "devstack", "app"}

#: what each package may import of ours (besides itself), built up floor by floor
_CORE = {"models", "runtime"}
_SERVICES = _CORE | {"forensics", "ingest", "integrations"}
_BELOW_APP = _SERVICES | {"stores", "activities", "workflows"}
ALLOWED: dict[str, set[str]] = {
    "models": set(),
    "runtime": {"models"},
    "stores": _CORE,
    "forensics": _CORE,
    "ingest": _CORE,
    "integrations": _CORE | {"ingest"},
    "activities": _SERVICES | {"stores"},
    "workflows": {"models", "activities"},
    "app": _BELOW_APP | {"examples"},
    "examples": _CORE | {"forensics"},
    "worker": _BELOW_APP | {"examples"},
    "api": _BELOW_APP | {"app", "worker"},
    "cli": _BELOW_APP | {"app", "worker", "devstack", "examples"},
    "devstack": _BELOW_APP | {"app", "worker", "examples"},
}
SQL_LIBRARIES = {"sqlalchemy", "asyncpg", "aiosqlite", "sqlite3", "alembic"}
NO_ENVIRONMENT = (
    "runtime",
    "activities",
    "stores",
    "forensics",
    "ingest",
    "integrations",
    "workflows",
    "models",
    "app",
)


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, at any depth (function-level too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _ours(name: str) -> str | None:
    top = name.split(".")[0]
    return top if top in PACKAGES else None


def _package_graph() -> dict[str, dict[str, set[str]]]:
    """package → imported package → the files that import it."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for package in PACKAGES:
        for path in _sources(package):
            for name in _imports(path):
                target = _ours(name)
                if target and target != package:
                    graph[package][target].add(str(path.relative_to(ROOT)))
    return graph


def test_every_package_has_its_rules() -> None:
    assert set(ALLOWED) == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_down_only(package: str) -> None:
    graph = _package_graph()
    broken = {
        target: sorted(files)
        for target, files in graph[package].items()
        if target not in ALLOWED[package]
    }
    assert broken == {}, f"{package} imports what it may not: {broken}"


def test_nothing_below_the_faces_imports_a_face_or_a_root() -> None:
    below = set(PACKAGES) - FACES_AND_ROOTS - {"examples"}
    for package in below:
        assert not (ALLOWED[package] & FACES_AND_ROOTS), package
    graph = _package_graph()
    offenders = {
        (package, target): sorted(files)
        for package in below
        for target, files in graph[package].items()
        if target in FACES_AND_ROOTS
    }
    assert offenders == {}


def test_the_api_and_the_cli_share_no_code() -> None:
    graph = _package_graph()
    assert "cli" not in graph["api"], dict(graph["api"])
    assert "api" not in graph["cli"], dict(graph["cli"])


def test_no_cycle_between_packages() -> None:
    graph = {p: set(targets) for p, targets in _package_graph().items()}
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                cycle = [*path[path.index(target) :], target]
                raise AssertionError(f"import cycle between packages: {' → '.join(cycle)}")
            if target not in state:
                visit(target)
        path.pop()
        state[node] = "done"

    for package in PACKAGES:
        if package not in state:
            visit(package)


def test_no_import_cycle_between_cli_modules() -> None:
    """The command groups are assembled in ``cli.main``; no group imports another's module."""
    for path in _sources("cli"):
        if path.name in ("main.py", "__init__.py"):
            continue
        groups = {n for n in _imports(path) if n.startswith("cli.")}
        assert groups <= {"cli.common", "cli.exit_codes"}, (path.name, groups)


def test_sql_is_built_only_in_stores() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            {n.split(".")[0] for n in _imports(path)} & SQL_LIBRARIES
        )
        for package in PACKAGES
        if package != "stores"
        for path in _sources(package)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def _reads_environment(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if any(a.name in ("environ", "getenv") for a in node.names):
                lines.append(node.lineno)
    return lines


def test_settings_are_read_only_in_the_composition_roots() -> None:
    offenders = {
        str(path.relative_to(ROOT)): lines
        for package in NO_ENVIRONMENT
        for path in _sources(package)
        if (lines := _reads_environment(path))
    }
    assert offenders == {}


def test_activities_and_workflows_do_not_reach_up() -> None:
    """The issue's own check: ``grep "from worker|import worker"`` over the lower floors."""
    for package in ("activities", "workflows", "runtime", "stores", "models"):
        for path in _sources(package):
            text = path.read_text()
            assert "from worker" not in text and "import worker" not in text, path
