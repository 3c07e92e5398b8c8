"""Every ``REPLAYBOOK_*`` variable the code names is documented on a docs page (the table of
docs/configuration.md, or the page of its topic), so a new setting cannot ship unexplained."""

from __future__ import annotations

import re
from pathlib import Path

from tests.quality.layout import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"\bREPLAYBOOK_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_variable_the_code_reads_is_documented() -> None:
    named = {
        name
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        for name in VARIABLE.findall(path.read_text())
    }
    documented = {
        name
        for page in (ROOT / "docs").rglob("*.md")
        for name in VARIABLE.findall(page.read_text())
    }
    assert len(named) > 30  # the scan found the settings
    assert sorted(named - documented) == []
