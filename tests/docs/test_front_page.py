"""The README is a front page: short, and its links into the repository lead somewhere (the
docs site's own links are checked by ``mkdocs build --strict``, which does not read it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 220
    assert "../shared" not in README.read_text()  # a clone has no ../shared


def test_the_readmes_relative_links_exist() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links into docs/"
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_the_make_test_command_is_what_ci_runs() -> None:
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")
    assert "make test" in README.read_text()
