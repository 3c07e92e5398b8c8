"""Long functions are split by idea: none of ours runs over 80 lines (migrations aside)."""

from __future__ import annotations

import ast

from tests.quality.layout import PACKAGES, ROOT

#: the packages checked: ours, and the benchmarks
CHECKED = (*PACKAGES, "bench")
LIMIT = 80


def test_no_function_is_longer_than_the_limit() -> None:
    long = []
    for package in CHECKED:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > LIMIT:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert long == []


def _decorator_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            names.add(f"{target.value.id}.{target.attr}")
    return names


def test_every_workflow_and_activity_entry_point_says_what_it_does() -> None:
    """Docstrings on every ``@activity.defn`` and every workflow run/signal/query/update."""
    entry = {
        "activity.defn",
        "workflow.run",
        "workflow.signal",
        "workflow.query",
        "workflow.update",
    }
    bare = []
    for package in ("activities", "workflows"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if _decorator_names(node) & entry and not ast.get_docstring(node):
                        bare.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert bare == []
