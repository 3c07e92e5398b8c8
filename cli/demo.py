"""``replaybook demo``: the end-to-end demo on the embedded stack."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import load_settings, run_async

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
    """The end-to-end demo on the embedded stack (what ``make demo`` runs): reference runs,
    two incidents with replays and counterfactuals, confirmation, regression gate, reports."""
    if sample_only:
        from devstack.demo import run_demo

        await run_demo(load_settings(), echo=typer.echo)
        return
    from devstack.demo_incidents import run_incident_demo

    await run_incident_demo(load_settings(), echo=typer.echo)
