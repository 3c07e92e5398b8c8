"""The command line starts quickly: importing it, and ``--help`` of every group, load none of
the heavy libraries (the Temporal SDK, SQLAlchemy, boto3, FastAPI…) nor the layers that use
them. Asserted on the set of imported modules, never on a time (the figure is measured with
``python -X importtime`` and described in docs/reference/cli.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: top-level packages a command imports only once it runs
HEAVY = (
    "temporalio",
    "sqlalchemy",
    "alembic",
    "boto3",
    "botocore",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "asyncpg",
    "aiosqlite",
    "cryptography",
    "structlog",
    "openai",
    "jsonschema",
    "prometheus_client",
    "pydantic_settings",
    # our layers that pull them in
    "app",
    "stores",
    "workflows",
    "activities",
    "forensics",
    "ingest",
    "integrations",
    "examples",
    "api",
)

PROBE = """
import json, sys
argv = sys.argv[1:]
if argv:
    sys.argv = ["replaybook", *argv]
    from cli.main import app
    try:
        app()
    except SystemExit:
        pass
else:
    import cli.main  # noqa: F401
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
"""


def loaded(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_heavy_module() -> None:
    modules = loaded()
    assert "cli" in modules and "typer" in modules  # the probe did import it
    assert sorted(modules & set(HEAVY)) == []
    assert "rich" not in modules  # typer loads it to format help, not to import


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("runs", "--help"),
        ("replay", "start", "--help"),
        ("incident", "open", "--help"),
        ("import", "tau-bench", "--help"),
        ("side-effects", "retry", "--help"),
        ("privacy", "delete-subject", "--help"),
        ("forensics", "--help"),
        ("dev", "up", "--help"),
        ("regress", "--help"),
    ],
)
def test_help_of_each_group_loads_no_heavy_module(argv: tuple[str, ...]) -> None:
    modules = loaded(*argv)
    assert "rich" in modules or "click" in modules or "typer" in modules
    assert sorted(modules & set(HEAVY)) == [], argv


def test_a_pure_local_command_loads_no_store_or_service(tmp_path) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text('{"b": 2, "a": 1.0}')
    modules = loaded("canonical", str(doc))
    assert "models" in modules  # canonical JSON is in models
    assert sorted(modules & set(HEAVY)) == []
