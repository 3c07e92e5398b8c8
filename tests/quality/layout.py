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
