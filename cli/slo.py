"""``replaybook slo [--json]``: the seed's SLOs from the stored data; exit 0 when every one
passes, 1 when one fails (``app/slo.py`` defines each objective and a critical run)."""

from __future__ import annotations

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN

app = typer.Typer()

#: exit code of ``replaybook slo`` when an objective is not met
EXIT_SLO_FAILED = EXIT_BROKEN


@app.command("slo")
@run_async
async def slo(json_: JsonOption = False) -> None:
    """Report the SLOs, each with its value, goal and PASS/FAIL (exit 1 when one fails).

    Critical-run evidence completeness (100%), UNKNOWN auto-retries (0), unreconciled critical
    side effects (0), replays that executed a write or used a write credential (0), confirmed
    incidents with a regression case (100%). Exit 0 when all pass, 1 when one fails."""
    from app.slo import compute_slos, render_text
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        result = await compute_slos(stores)
    if json_:
        print_json(result.model_dump(mode="json"))
    else:
        typer.echo(render_text(result))
    if not result.passed:
        raise typer.Exit(EXIT_SLO_FAILED)
