"""``replaybook canonical`` and ``replaybook runs list | show | verify``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import JsonOption, fail, load_settings, print_json, run_async
from cli.exit_codes import EXIT_BROKEN
from models.errors import InvalidInputError

app = typer.Typer()
runs_app = typer.Typer(
    help="Recorded runs: list, show, verify their evidence (chain, payloads, artifacts, lookup rows, anchor).",
    no_args_is_help=True,
)
app.add_typer(runs_app, name="runs")


# canonical ------------------------------------------------------------------------------------


@app.command()
def canonical(
    path: Annotated[str, typer.Argument(help="JSON file, or - for standard input.")] = "-",
    hash_: Annotated[
        bool, typer.Option("--hash", help="Print the sha256: digest instead.")
    ] = False,
) -> None:
    """Write the RFC 8785 canonical form of a JSON document (strings NFC-normalised)."""
    from models.canonical import canonicalize_text
    from models.digest import sha256_digest

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        fail(f"canonical: cannot read {path}: {exc.strerror}")
    try:
        out = canonicalize_text(data)
    except InvalidInputError as exc:
        fail(f"canonical: {exc}")
    if hash_:
        sys.stdout.write(sha256_digest(out) + "\n")
    else:
        sys.stdout.buffer.write(out)
    sys.stdout.flush()


# runs -----------------------------------------------------------------------------------------


@runs_app.command("list")
@run_async
async def runs_list(
    show_all: Annotated[
        bool, typer.Option("--all", help="Every run, replays and regression replays included.")
    ] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="Only runs of this kind: source, imported, replay or regress (repeatable).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List recorded runs, newest first: by default the runs incidents are about (recorded
    live or imported), not the replays of them."""
    from app.runs import DEFAULT_RUN_KINDS, RUN_KINDS, list_runs_view
    from stores.bundle import open_stores

    for k in kind or []:
        if k not in RUN_KINDS:
            raise InvalidInputError(
                f"--kind must be one of {', '.join(RUN_KINDS)}, not {k!r}", field="--kind"
            )
    kinds = None if show_all else tuple(kind or DEFAULT_RUN_KINDS)
    async with open_stores(load_settings().stores) as stores:
        rows = await list_runs_view(stores, kinds=kinds)
    if as_json:
        print_json({"runs": rows})
        return
    if not rows:
        typer.echo(
            "no runs recorded" if show_all else "no runs of these kinds (--all lists every run)"
        )
    for row in rows:
        typer.echo(
            f"{row['run_id']}  {row['kind']:<8}  {row['graph_id']}@{row['graph_version']}"
            f"  {row['status']:<9}  {row['event_count']:>6} events  {row['created_at']}"
        )


@runs_app.command("show")
@run_async
async def runs_show(run_id: str, as_json: JsonOption = False) -> None:
    """Show a run: its header, pinned versions and events."""
    from app.runs import describe_run
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        view = await describe_run(stores, run_id)
    if as_json:
        print_json(view)
        return
    _print_run(view)


def _print_run(view: dict[str, Any]) -> None:
    """The run as text: header, pins, completeness, side effects, fixtures, then the events."""
    typer.echo(
        f"run {view['run_id']}  {view['graph_id']}@{view['graph_version']}  {view['status']}"
    )
    integrity = view.get("integrity") or {}
    if integrity and not integrity["intact"]:
        forged = "" if integrity["header_verified"] else " (the header shown may be forged)"
        typer.echo(f"  DOES NOT VERIFY{forged}: {integrity['summary']}")
    for name, value in view["pinned"].items():
        if value is not None:
            typer.echo(f"  {name}: {value}")
    if view.get("subjects"):
        subjects = [
            f"{s['subject_id']} ({str(s.get('kind', '')).lower().replace('_', ' ')})"
            if isinstance(s, dict)
            else str(s)
            for s in view["subjects"]
        ]
        typer.echo(f"  subjects: {', '.join(subjects)}")
    c = view["evidence_completeness"]
    typer.echo(f"  evidence completeness: {c['score']}/{c['total']}, confidence {c['confidence']}")
    for item in c["missing"]:
        typer.echo(f"    missing {item}: {c['reasons'].get(item, 'not recorded')}")
    typer.echo(f"  side effects: {len(view['side_effects'])}")
    for e in view["side_effects"]:
        typer.echo(
            f"    {e['side_effect_id']}  {e['capability_id']}  {e['status']}"
            f"  step={e['step_id']}  request id {e.get('provider_request_id') or '-'}"
        )
    typer.echo(f"  tool fixtures: {len(view['fixtures'])}")
    for f in view["fixtures"]:
        typer.echo(
            f"    {f.get('capability_id', '?')}  {f.get('outcome', '?')}"
            f"  request {str(f.get('request_hash', ''))[:19]}…"
        )
    typer.echo(f"  events: {view['event_count']}  head: {view['head_hash']}")
    for dup in view["duplicates"]:
        typer.echo(
            f"  CRITICAL duplicate write: {len(dup['side_effect_ids'])} side effects with action "
            f"{dup['action_hash']}: {', '.join(dup['side_effect_ids'])}"
        )
    for event in view["events"]:
        typer.echo(
            f"  #{event['sequence']:<5} {event['type']:<17} step={event['step_id']}"
            f"  {event['logical_time']}  {event['payload_hash'][:19]}…"
        )


@runs_app.command("verify")
@run_async
async def runs_verify(run_id: str, as_json: JsonOption = False) -> None:
    """Verify a run: its hash chain, its artifact-stored payloads and referenced artifacts, the
    lookup rows (side effects, approvals, policy decisions, checkpoints, fixtures, …) against
    the chained events, and its latest anchor. Exit 0 when intact, 1 naming the first problem."""
    from app.anchors import anchor_use
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        result = await stores.ledger.verify(run_id)
        anchors = anchor_use(stores, result)
    if as_json:
        print_json(result.report() | {"anchor_log": anchors})
    else:
        typer.echo(result.summary())
        typer.echo(f"anchors: {anchors['note']}")
        if result.header_chained is False:  # recorded before the header was chained
            typer.echo(f"header: {result.report()['header']}")
    if not result.intact:
        raise typer.Exit(EXIT_BROKEN)
