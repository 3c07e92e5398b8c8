"""``replaybook privacy``: retention sweep, legal hold, deletion propagation (rule 17)."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from cli.common import JsonOption, load_settings, print_json, run_async

app = typer.Typer()

privacy_app = typer.Typer(
    help="Retention, legal hold and deletion of recorded evidence.", no_args_is_help=True
)
app.add_typer(privacy_app, name="privacy")


@privacy_app.command("sweep")
@run_async
async def privacy_sweep(as_json: JsonOption = False) -> None:
    """Destroy the raw content of runs past their retention class (runs on hold are kept)."""
    from app.privacy import sweep
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        result = await sweep(stores)
    if as_json:
        print_json(result)
        return
    typer.echo(f"swept at {result['swept_at']}: {len(result['destroyed'])} run(s) expired")
    for item in result["destroyed"]:
        typer.echo(f"  {item['run_id']} ({item['class']}): {item['raw_payloads']} raw payloads")
    for item in result["held"]:
        typer.echo(f"  kept {item['run_id']}: {'; '.join(item['held'])}")


@privacy_app.command("hold")
@run_async
async def privacy_hold(
    run_id: str,
    reason: Annotated[str, typer.Option("--reason", help="Why the evidence is held.")],
    until: Annotated[
        str | None, typer.Option("--until", help="Hold until this date (ISO); open-ended if unset.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Put a run's evidence on legal hold (and its objects, with S3 Object Lock legal hold)."""
    from app.privacy import hold, parse_until
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        view = await hold(stores, run_id, reason, parse_until(until))
    if as_json:
        print_json(view)
    else:
        typer.echo(
            f"{view['hold_id']}: run {run_id} on legal hold ({view['objects_held']} objects held)"
        )


@privacy_app.command("release")
@run_async
async def privacy_release(
    run_id: str,
    incident: Annotated[
        str | None,
        typer.Option(
            "--incident",
            help="Also release the evidence freeze of this incident (once COMPLETED or FAILED).",
        ),
    ] = None,
    reason: Annotated[
        str, typer.Option("--reason", help="Why the hold is lifted (chained with the release).")
    ] = "",
    by: Annotated[str, typer.Option("--by", help="Who releases it (chained).")] = "cli",
    as_json: JsonOption = False,
) -> None:
    """Release a run's legal holds. An incident freeze keeps holding its evidence unless
    released explicitly with --incident ID. Each release is chained in the governance log
    (who, when, why): a hold deleted in SQL still holds until released here."""
    from app.privacy import release
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        result = await release(stores, run_id, incident, by=by, reason=reason)
    if as_json:
        print_json(result)
        return
    typer.echo(
        f"run {run_id}: released {len(result['released'])} hold(s), "
        f"{len(result['released_freezes'])} freeze(s)"
    )
    for reason in result["still_held"]:
        typer.echo(f"  still held: {reason}")


@privacy_app.command("delete-subject")
@run_async
async def privacy_delete_subject(
    subject_id: str,
    request_id: Annotated[str, typer.Option("--request-id", help="The deletion request's id.")],
    as_json: JsonOption = False,
) -> None:
    """Crypto-shred a data subject: destroy their data keys and raw content everywhere and
    record a receipt. Exit 2 naming the hold when any of their runs is on legal hold."""
    from app.privacy import delete_subject
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        receipt = await delete_subject(
            stores, subject_id, request_id, by=f"cli:{getpass.getuser()}"
        )
    if as_json:
        print_json(receipt.model_dump(mode="json"))
        return
    typer.echo(
        # the receipt's subject: an address given in clear is named by its pseudonym only
        f"deletion {receipt.request_id} of {receipt.subject_id} at "
        f"{receipt.executed_at.isoformat()}: "
        f"{receipt.raw_payloads_destroyed} raw payloads, {receipt.data_keys_destroyed} keys, "
        f"{len(receipt.runs)} run(s)"
    )
