"""What the architecture rules read of each source file, parsed once per test session.

Each file is parsed with ``ast`` (nothing is imported or run) into a ``ModuleFacts``: the
modules it imports by statement, the modules it imports by name at run time
(``importlib.import_module("…")``, ``import_module("…")``, ``__import__("…")``, an f-string's
constant head), where it uses the SQL schema (``stores.sql.schema``) and where it reads the
environment. ``source_tree()`` caches the whole tree, so the rules cost one parse of the tree
per session instead of one per test.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.quality.layout import PACKAGES, ROOT

#: the module whose tables build SQL: used outside ``stores/`` it means SQL built outside it
SQL_SCHEMA = "stores.sql.schema"
_IMPORT_BY_NAME = {"import_module", "__import__"}


@dataclass(frozen=True)
class ModuleFacts:
    path: str  # relative to the scanned root
    imports: frozenset[str]  # absolute module names imported by statement, at any depth
    string_imports: frozenset[str]  # module names imported by a call with a constant name
    schema_uses: tuple[int, ...]  # lines that import or name ``stores.sql.schema``
    environment_reads: tuple[int, ...]  # lines that read ``os.environ`` / ``os.getenv``

    def all_imports(self) -> frozenset[str]:
        return self.imports | self.string_imports


def _constant_head(node: ast.expr) -> str | None:
    """The module name a call's first argument spells, or its constant head (``f"cli.{x}"``
    → ``cli.``); ``None`` when nothing of it is a constant, or it is relative."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        name = node.value
    elif (
        isinstance(node, ast.JoinedStr)
        and node.values
        and isinstance(node.values[0], ast.Constant)
        and isinstance(node.values[0].value, str)
    ):
        name = node.values[0].value
    else:
        return None
    return name if name and not name.startswith(".") else None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_schema(name: str) -> bool:
    return name == SQL_SCHEMA or name.startswith(SQL_SCHEMA + ".")


def scan_source(text: str, path: str = "<memory>") -> ModuleFacts:
    """The facts of one module's source ``text``."""
    imports: set[str] = set()
    strings: set[str] = set()
    schema: set[int] = set()
    environment: set[int] = set()
    for node in ast.walk(ast.parse(text, filename=path)):
        if isinstance(node, ast.Import):
            imports.update(alias.name for alias in node.names)
            if any(_is_schema(alias.name) for alias in node.names):
                schema.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imports.add(node.module)
            named = {f"{node.module}.{alias.name}" for alias in node.names}
            if _is_schema(node.module) or any(_is_schema(n) for n in named):
                schema.add(node.lineno)
            if node.module == "os" and named & {"os.environ", "os.getenv"}:
                environment.add(node.lineno)
        elif isinstance(node, ast.Call) and node.args and _called_name(node) in _IMPORT_BY_NAME:
            name = _constant_head(node.args[0])
            if name:
                strings.add(name)
                if _is_schema(name):
                    schema.add(node.lineno)
        elif isinstance(node, ast.Attribute):
            if node.attr in ("environ", "getenv", "environb"):
                if isinstance(node.value, ast.Name) and node.value.id == "os":
                    environment.add(node.lineno)
    return ModuleFacts(
        path=path,
        imports=frozenset(imports),
        string_imports=frozenset(strings),
        schema_uses=tuple(sorted(schema)),
        environment_reads=tuple(sorted(environment)),
    )


def scan_tree(root: Path, packages: tuple[str, ...]) -> dict[str, list[ModuleFacts]]:
    """package → the facts of each of its modules, for the packages under ``root``."""
    return {
        package: [
            scan_source(path.read_text(), str(path.relative_to(root)))
            for path in sorted((root / package).rglob("*.py"))
        ]
        for package in packages
    }


@functools.cache
def source_tree() -> dict[str, list[ModuleFacts]]:
    """The project's tree, scanned once per process (one pytest session or xdist worker)."""
    return scan_tree(ROOT, PACKAGES)


def top_package(name: str, packages: tuple[str, ...] | frozenset[str]) -> str | None:
    """The package of ours a module name belongs to (``cli.main`` → ``cli``; a string import's
    head ``cli.`` too), or ``None``."""
    top = name.split(".")[0]
    return top if top in packages else None


def package_graph(tree: dict[str, list[ModuleFacts]]) -> dict[str, dict[str, set[str]]]:
    """package → imported package of ours → the files that import it (by statement or by
    name at run time)."""
    packages = frozenset(tree)
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for package, modules in tree.items():
        for module in modules:
            for name in module.all_imports():
                target = top_package(name, packages)
                if target and target != package:
                    graph[package][target].add(module.path)
    return graph


def forbidden_imports(
    tree: dict[str, list[ModuleFacts]], allowed: dict[str, set[str]]
) -> dict[str, dict[str, list[str]]]:
    """package → the packages it imports but may not → the files that do."""
    graph = package_graph(tree)
    found = {
        package: {
            target: sorted(files)
            for target, files in graph[package].items()
            if target not in allowed.get(package, set())
        }
        for package in tree
    }
    return {package: targets for package, targets in found.items() if targets}


def schema_users(tree: dict[str, list[ModuleFacts]]) -> dict[str, tuple[int, ...]]:
    """file → its lines using ``stores.sql.schema``, outside ``stores/``."""
    return {
        module.path: module.schema_uses
        for package, modules in tree.items()
        if package != "stores"
        for module in modules
        if module.schema_uses
    }
