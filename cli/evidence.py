"""``replaybook evidence show`` (sanitized by default, raw with a reason, audited) and
``replaybook audit``."""

from __future__ import annotations

import getpass
import json
from typing import Annotated

import typer

from cli.common import JsonOption, load_settings, print_json, run_async

app = typer.Typer()

evidence_app = typer.Typer(help="Recorded evidence payloads.", no_args_is_help=True)
app.add_typer(evidence_app, name="evidence")


@evidence_app.command("show")
@run_async
async def evidence_show(
    run_id: str,
    sequence: int,
    raw: Annotated[
        bool, typer.Option("--raw", help="The raw payload (needs the KEK; audited).")
    ] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why raw is read.")] = None,
    as_json: JsonOption = False,
) -> None:
    """One event's payload: the sanitized view, or with --raw --reason the raw one."""
    from app.privacy import read_evidence
    from models.errors import AccessDeniedError
    from stores.bundle import open_stores

    if raw and not (reason or "").strip():
        raise AccessDeniedError("--raw needs --reason TEXT (every raw read is audited)")
    async with open_stores(load_settings().stores) as stores:
        out = await read_evidence(
            stores,
            run_id,
            sequence,
            raw=raw,
            # the CLI reads raw only with the KEK: holding it is the CLI's forensic role
            actor=f"cli:{getpass.getuser()}",
            reason=reason or "",
        )
    content, view = out["payload"], out["view"]
    if as_json:
        print_json(out)
        return
    typer.echo(
        f"{run_id}#{sequence} {out['type']} ({view}; policy {out['redaction_policy_version']})"
    )
    typer.echo(json.dumps(content, indent=2, sort_keys=True))


@app.command("audit")
@run_async
async def audit(as_json: JsonOption = False) -> None:
    """Every access to raw evidence: who, when, what, why, outcome."""
    from app.privacy import audit_log
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        rows = await audit_log(stores)
    if as_json:
        print_json({"audit": rows})
        return
    for r in rows:
        typer.echo(
            f"{r['at']}  {r['actor']}  {r['run_id']}#{r['sequence']}  {r['outcome']}  {r['reason']}"
        )
