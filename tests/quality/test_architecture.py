"""The arrows of the architecture (docs/architecture.md), enforced on the source (ast, no
imports run):

faces (``cli``, ``api``, ``devstack``) → ``app`` → ``workflows`` → ``activities`` →
``forensics``, ``ingest``, ``integrations`` → ``runtime`` → ``models``, with ``stores``
implementing the ports of ``runtime``; ``worker`` wires the Temporal worker. Also: no cycle
between packages, SQL only in ``stores`` (no SQL library and no ``stores.sql.schema`` outside
it), no environment reads below the composition roots, and the two faces share no code.

The packages are the folders (``layout.PACKAGES``), an import by name at run time
(``importlib.import_module("cli.main")``) counts as an import, and the tree is parsed once per
session (``source_facts.source_tree``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.quality.layout import PACKAGES, top_level_packages, unmirrored_test_folders
from tests.quality.source_facts import (
    forbidden_imports,
    package_graph,
    scan_source,
    scan_tree,
    schema_users,
    source_tree,
)

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


def test_every_package_has_its_rules() -> None:
    """A new top-level folder with an ``__init__.py`` fails here until it is given its floor."""
    assert set(ALLOWED) == set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_down_only(package: str) -> None:
    broken = forbidden_imports(source_tree(), ALLOWED).get(package, {})
    assert broken == {}, f"{package} imports what it may not: {broken}"


def test_nothing_below_the_faces_imports_a_face_or_a_root() -> None:
    below = set(PACKAGES) - FACES_AND_ROOTS - {"examples"}
    for package in below:
        assert not (ALLOWED[package] & FACES_AND_ROOTS), package
    graph = package_graph(source_tree())
    offenders = {
        (package, target): sorted(files)
        for package in below
        for target, files in graph[package].items()
        if target in FACES_AND_ROOTS
    }
    assert offenders == {}


def test_the_api_and_the_cli_share_no_code() -> None:
    graph = package_graph(source_tree())
    assert "cli" not in graph["api"], dict(graph["api"])
    assert "api" not in graph["cli"], dict(graph["cli"])


def test_no_cycle_between_packages() -> None:
    graph = {p: set(targets) for p, targets in package_graph(source_tree()).items()}
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
    for module in source_tree()["cli"]:
        if Path(module.path).name in ("main.py", "__init__.py"):
            continue
        groups = {n for n in module.all_imports() if n.startswith("cli.")}
        assert groups <= {"cli.common", "cli.exit_codes"}, (module.path, groups)


def test_sql_is_built_only_in_stores() -> None:
    offenders = {
        module.path: sorted({n.split(".")[0] for n in module.all_imports()} & SQL_LIBRARIES)
        for package, modules in source_tree().items()
        if package != "stores"
        for module in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_sql_schema_is_used_only_in_stores() -> None:
    """``stores.sql.schema``'s tables build SQL: a face or the app that imports them builds SQL
    outside ``stores/`` even without importing SQLAlchemy itself."""
    assert schema_users(source_tree()) == {}


def test_settings_are_read_only_in_the_composition_roots() -> None:
    tree = source_tree()
    offenders = {
        module.path: module.environment_reads
        for package in NO_ENVIRONMENT
        for module in tree[package]
        if module.environment_reads
    }
    assert offenders == {}


# --- the rules catch what they are meant to (synthetic sources, nothing committed) ------------


@pytest.mark.parametrize(
    "source",
    [
        'import importlib\nimportlib.import_module("cli.main")\n',
        'from importlib import import_module\nimport_module("cli")\n',
        'import importlib as il\nil.import_module(f"cli.{1}")\n',
        '__import__("cli.replay")\n',
    ],
)
def test_an_import_by_name_counts_as_an_import(source: str) -> None:
    facts = scan_source(source)
    assert {name.split(".")[0] for name in facts.string_imports} == {"cli"}


def test_an_import_by_a_computed_or_relative_name_is_not_guessed() -> None:
    facts = scan_source('import importlib\nimportlib.import_module(name)\nimport_module(".x")\n')
    assert facts.string_imports == frozenset()


@pytest.mark.parametrize(
    "source",
    [
        "from stores.sql import schema\n",
        "from stores.sql.schema import events\n",
        "import stores.sql.schema\n",
        'import importlib\nimportlib.import_module("stores.sql.schema")\n',
    ],
)
def test_a_use_of_the_sql_schema_is_seen(source: str) -> None:
    assert scan_source(source).schema_uses == (source.count("\n"),)


def test_an_upward_import_by_name_in_app_fails_the_rules(tmp_path: Path) -> None:
    """The acceptance check of issue 34: ``importlib.import_module("cli…")`` added to ``app/``
    is an upward import, and ``stores.sql.schema`` in ``app/`` is SQL outside ``stores/``."""
    for package in ("app", "cli", "stores", "newpackage"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "app" / "sneaky.py").write_text(
        'import importlib\n\ncommands = importlib.import_module("cli.main")\n'
    )
    (tmp_path / "app" / "rows.py").write_text("from stores.sql import schema\n")
    packages = top_level_packages(tmp_path)
    assert packages == ("app", "cli", "newpackage", "stores")  # found in the folders
    tree = scan_tree(tmp_path, packages)
    assert forbidden_imports(tree, ALLOWED) == {
        "app": {"cli": ["app/sneaky.py"]},
    }
    assert schema_users(tree) == {"app/rows.py": (1,)}
    assert set(ALLOWED) != set(packages)  # a new package without rules is a failure


def test_the_tests_mirror_the_packages() -> None:
    """``tests/<package>/<subpackage>/test_*.py`` for a package's tests, or a declared suite
    (``layout.SUITES``): a test is found where its code is."""
    assert unmirrored_test_folders() == []


def test_a_test_folder_that_mirrors_nothing_is_named(tmp_path: Path) -> None:
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "__init__.py").write_text("")
    for folder in ("runtime", "misc", "chaos/deep"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        (tmp_path / "tests" / folder / "test_x.py").write_text("")
    assert unmirrored_test_folders(tmp_path) == ["tests/chaos/deep", "tests/misc"]
