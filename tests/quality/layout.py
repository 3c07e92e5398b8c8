"""The project's own top-level packages, as the quality tests read them: every folder at the
root that is a Python package, so a new top-level package is seen (and must be given its
rules in ``test_architecture.ALLOWED``) the moment it exists."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: root packages that are not part of the product: the suite and the benchmarks, which reach
#: into every layer on purpose (tamper with rows, time the stores); the SDK is a distribution
#: of its own under ``sdk/src`` and not a root package
HARNESSES = frozenset({"tests", "bench"})


def top_level_packages(root: Path = ROOT) -> tuple[str, ...]:
    """The folders of ``root`` holding an ``__init__.py``, the harnesses left out."""
    return tuple(
        sorted(
            path.name
            for path in root.iterdir()
            if path.is_dir()
            and not path.name.startswith(".")
            and (path / "__init__.py").is_file()
            and path.name not in HARNESSES
        )
    )


PACKAGES = top_level_packages()

#: the test folders that are not a package's mirror: suites that cross every layer on purpose
#: (a whole stack killed, tampered with, driven by a real framework or a real model), the
#: quality rules themselves and the documentation's own checks
SUITES = frozenset({"chaos", "tamper", "live", "local_models", "quality", "docs"})


def unmirrored_test_folders(root: Path = ROOT) -> list[str]:
    """Folders under ``tests/`` holding test modules that mirror no folder of the project
    (``tests/<package>/<subpackage>/…``, or ``tests/infra`` and ``tests/sdk`` for the folders
    that hold no Python package of the root) and are not one of the ``SUITES``."""
    tests = root / "tests"
    wrong = []
    for module in sorted(tests.rglob("test_*.py")):
        parts = module.parent.relative_to(tests).parts
        if not parts:
            continue
        if parts[0] in SUITES and len(parts) == 1:
            continue
        if not root.joinpath(*parts).is_dir():
            wrong.append("/".join(("tests", *parts)))
    return sorted(set(wrong))
