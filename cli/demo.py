"""``replaybook demo``: the end-to-end demo on the embedded stack."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import fail, load_settings, run_async
from cli.exit_codes import EXIT_BROKEN

app = typer.Typer()


# demo -----------------------------------------------------------------------------------------


@app.command()
@run_async
async def demo(
    sample_only: Annotated[
        bool,
        typer.Option("--sample-only", help="Only record and verify one sample run (no Temporal)."),
    ] = False,
) -> None:
    """The end-to-end demo on the embedded stack (what ``make demo`` runs).

    Reference runs, two incidents with replays and counterfactuals, confirmation, regression
    gate, reports."""
    if sample_only:
        from devstack.demo import run_demo

        await run_demo(load_settings(), echo=typer.echo)
        return
    from devstack.demo_incidents import DemoStepFailed, run_incident_demo

    try:
        await run_incident_demo(load_settings(), echo=typer.echo)
    except DemoStepFailed as exc:
        fail(f"demo failed: {exc}", EXIT_BROKEN)
