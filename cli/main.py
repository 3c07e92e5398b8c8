"""The ``replaybook`` command line, assembled from one module per command group.

Exit codes are public and listed in ``cli.exit_codes``. Each group module owns a ``typer.Typer``
named ``app`` holding its commands; this module merges them into the root application, so no
group imports another and nothing imports this module but the console entry point.
"""

from __future__ import annotations

import typer

from cli import (
    agent,
    anchors,
    api_server,
    demo,
    dev,
    evidence,
    forensics,
    importing,
    incident,
    model_registry,
    privacy,
    replay,
    runs,
    sandbox,
    slo,
)

app = typer.Typer(
    name="replaybook",
    help="Record, verify and replay LLM agent runs as tamper-evident evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

for group in (
    runs,
    anchors,
    demo,
    agent,
    importing,
    replay,
    incident,
    evidence,
    privacy,
    forensics,
    sandbox,
    slo,
    model_registry,
    dev,
    api_server,
):
    app.add_typer(group.app)


def main() -> None:  # pragma: no cover - console entry point
    app()
