"""``replaybook anchors write | verify``: run heads anchored outside the database."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN

app = typer.Typer()
anchors_app = typer.Typer(
    help="Anchors: run heads written to an append-only, hash-chained log beside the artifacts.",
    no_args_is_help=True,
)
app.add_typer(anchors_app, name="anchors")


@anchors_app.command("write")
@run_async
async def anchors_write(
    run_id: Annotated[str | None, typer.Option("--run", help="Anchor this run.")] = None,
    all_runs: Annotated[bool, typer.Option("--all", help="Anchor every run.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Anchor a run's verified chain head (or every run's) in the anchor log."""
    from app.anchors import write_anchors
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        written = await write_anchors(stores, run_id, all_runs=all_runs)
    if as_json:
        print_json({"anchors": written})
        return
    for a in written:
        typer.echo(f"anchored {a['run_id']} at sequence {a['sequence']}: {a['head']}")


@anchors_app.command("verify")
@run_async
async def anchors_verify(as_json: JsonOption = False) -> None:
    """Check the anchor log's chain and every anchored run against its latest anchor; exit 1
    naming the first problem (an edited log, a truncated or deleted run)."""
    from app.anchors import verify_anchors
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        view = await verify_anchors(stores)
    if as_json:
        print_json(view)
    elif view["intact"]:
        typer.echo(f"intact: {view['entries']} anchors of {view['runs']} runs")
    else:
        for problem in view["problems"]:
            typer.echo(f"broken: {problem['message']}")
    if not view["intact"]:
        raise typer.Exit(EXIT_BROKEN)
