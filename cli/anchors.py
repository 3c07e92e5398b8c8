"""``replaybook anchors write | verify | public-key``: run heads anchored outside the database,
in a signed log apart from the artifact store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN
from models.errors import ConfigurationError

app = typer.Typer()
anchors_app = typer.Typer(
    help="Anchors: run heads written to an append-only, hash-chained, signed log kept apart from "
    "the database and the artifact store (REPLAYBOOK_ANCHORS).",
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
async def anchors_verify(
    location: Annotated[
        str | None,
        typer.Argument(
            help="Check the copy of an anchor log here (a directory or s3://bucket/prefix) "
            "offline: no database, no stack; needs --public-key."
        ),
    ] = None,
    public_key: Annotated[
        Path | None,
        typer.Option(
            "--public-key",
            help="The anchor key's public half (PEM, from `anchors public-key`); default: the "
            "configured one.",
        ),
    ] = None,
    min_length: Annotated[
        int | None,
        typer.Option(
            "--min-length",
            min=0,
            help="The log's length noted earlier: fewer entries now is a truncated log (its "
            "newest entries and their copies deleted).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Check the anchor log's chain and signatures, the runs' copies of their entries, and
    (without LOCATION) every anchored run against its latest anchor; exit 1 naming the first
    problem (an edited, forged or truncated log, a truncated or deleted run)."""
    from app.anchors import verify_anchor_copy, verify_anchors
    from stores.bundle import open_stores

    settings = load_settings()
    if location is not None:
        if public_key is None:
            raise ConfigurationError(
                "--public-key: required to check a copy of the anchor log", field="--public-key"
            )
        view = await verify_anchor_copy(location, public_key, settings.stores, min_length)
    else:
        stores_settings = settings.stores
        if public_key is not None:
            anchors = stores_settings.anchors.model_copy(update={"public_key": str(public_key)})
            stores_settings = stores_settings.model_copy(update={"anchors": anchors})
        async with open_stores(stores_settings) as stores:
            view = await verify_anchors(stores, min_length=min_length)
    if as_json:
        print_json(view)
    else:
        _print_view(view)
    if not view["intact"]:
        raise typer.Exit(EXIT_BROKEN)


def _print_view(view: dict[str, Any]) -> None:
    runs = f" of {view['runs']} runs" if "runs" in view else ""
    state = "intact" if view["intact"] else "broken"
    typer.echo(
        f"{state}: {view['length']} anchors{runs} in {view['location']}, signed by key "
        f"{view['key_id']}, head {view['head']}"
    )
    if view["unsigned"]:
        typer.echo(f"  entries 1-{view['unsigned']} are unsigned (written before signing)")
    legacy = view["legacy"]
    if legacy is not None:
        typer.echo(
            f"  legacy unsigned log {legacy['location']}: {legacy['entries']} entries, chain "
            f"{'intact' if legacy['intact'] else 'broken'} (it resists no one who can write "
            "the artifact store)"
        )
    for problem in view["problems"]:
        typer.echo(f"broken: {problem['message']}")


@anchors_app.command("public-key")
def anchors_public_key(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write it here.")] = None,
) -> None:
    """Print (or write) the PEM public key that checks this installation's anchors."""
    from app.anchors import anchor_public_pem

    pem = anchor_public_pem(load_settings().stores)
    if output is None:
        typer.echo(pem.decode(), nl=False)
    else:
        output.write_bytes(pem)
        typer.echo(str(output))
